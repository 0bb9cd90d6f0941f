// Only reachable through libchain_c's local scope (its NEEDED), never global.
extern "C" __attribute__((visibility("default"))) int chain_local_symbol() { return 42; }
