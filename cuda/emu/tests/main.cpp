// cuda/emu/tests/main.cpp: the doctest runner of the CPU CUDA emulator's tests.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
