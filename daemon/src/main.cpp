// The glintd executable (daemon/src/glintd_main.cpp is the process).
#include "glint/daemon/glintd_main.hpp"

int main(int argc, char** argv) { return glint::daemon::glintd_main(argc, argv); }
