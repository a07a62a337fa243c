// SLUICE_API marks what libsluice.so exports: the classes and functions of include/sluice/ that
// are defined inside the library. The library is compiled with hidden visibility, so nothing else
// of it (kernels, backends, the server) is part of the shared library's ABI. Inline functions and
// templates need no mark: they are compiled into the program that uses them.
#pragma once

#define SLUICE_API [[gnu::visibility("default")]]
