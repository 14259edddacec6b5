// workbench/tests/main.cpp: the doctest runner of the workbench tests.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
