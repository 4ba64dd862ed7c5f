# Cross-compiling for ARM64 Linux on an x86-64 Debian machine (the arm64 preset): Debian's aarch64 cross
# compiler, the arm64 libraries installed beside the native ones (multiarch, /usr/lib/aarch64-linux-gnu;
# scripts/setup adds the architecture), and qemu-user to run what was built (the tests, and GoogleTest's
# discovery of them).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Libraries, CMake packages and pkg-config files of the arm64 architecture only.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
# The arm64 dynamic loader and libraries are installed at their multiarch paths, where qemu finds them.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
