// RTLD_NEXT chain, library B: the next chain_foo after A.
extern "C" __attribute__((visibility("default"))) int chain_foo() { return 2; }
