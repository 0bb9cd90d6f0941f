// In progress: see sim_device.h
#include "vramtrace/sim_device.h"
