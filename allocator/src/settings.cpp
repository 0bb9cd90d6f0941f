// In progress
#include "vramtrace/settings.h"
