#include "engine/cli/cli.h"

int main(int argc, char** argv) { return engine::cli_main(argc, argv); }
