#include "cudabranch.c"
