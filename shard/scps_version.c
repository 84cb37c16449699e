#include "scps_version.h"

const char *scps_version(void) { return SCPS_VERSION_STRING; }
