// In progress: see caching_allocator.h
#include "vramtrace/caching_allocator.h"
