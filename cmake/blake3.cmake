# BLAKE3, the default hash of chunk indexes (docs/chunk-index.md). A system libblake3 is used
# where one is installed (Debian sid's libblake3-dev); otherwise the official C implementation
# that Debian bookworm ships as source in librust-blake3-dev (scripts/install-deps.sh installs
# it, no Rust toolchain needed) is built here into a small static library, with the x86-64
# assembly of its SSE2/SSE4.1/AVX2/AVX-512 back ends and the runtime dispatcher. Nothing of it
# is copied into this repository. Defines the target modelfs::blake3.
find_path(MODELFS_BLAKE3_SYSTEM_INCLUDE blake3.h)
find_library(MODELFS_BLAKE3_SYSTEM_LIB blake3)
if(MODELFS_BLAKE3_SYSTEM_INCLUDE AND MODELFS_BLAKE3_SYSTEM_LIB)
  add_library(modelfs_blake3 INTERFACE)
  target_include_directories(modelfs_blake3 SYSTEM INTERFACE ${MODELFS_BLAKE3_SYSTEM_INCLUDE})
  target_link_libraries(modelfs_blake3 INTERFACE ${MODELFS_BLAKE3_SYSTEM_LIB})
  message(STATUS "modelfs: BLAKE3 from ${MODELFS_BLAKE3_SYSTEM_LIB}")
else()
  set(MODELFS_BLAKE3_SOURCE_DIR "" CACHE PATH "BLAKE3's C sources (blake3.c and friends)")
  if(NOT MODELFS_BLAKE3_SOURCE_DIR)
    # The directory name carries the crate's version; take the newest one installed.
    file(GLOB candidates LIST_DIRECTORIES true /usr/share/cargo/registry/blake3-*/c)
    list(SORT candidates COMPARE NATURAL ORDER DESCENDING)
    list(GET candidates 0 MODELFS_BLAKE3_SOURCE_DIR)
  endif()
  if(NOT EXISTS "${MODELFS_BLAKE3_SOURCE_DIR}/blake3_dispatch.c")
    message(FATAL_ERROR "modelfs: BLAKE3 not found: install libblake3-dev, or librust-blake3-dev "
                        "(its C sources; scripts/install-deps.sh does), or set "
                        "MODELFS_BLAKE3_SOURCE_DIR")
  endif()
  enable_language(ASM)
  set(dir ${MODELFS_BLAKE3_SOURCE_DIR})
  set(sources ${dir}/blake3.c ${dir}/blake3_dispatch.c ${dir}/blake3_portable.c)
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
    list(APPEND sources ${dir}/blake3_sse2_x86-64_unix.S ${dir}/blake3_sse41_x86-64_unix.S
         ${dir}/blake3_avx2_x86-64_unix.S ${dir}/blake3_avx512_x86-64_unix.S)
  elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64")
    list(APPEND sources ${dir}/blake3_neon.c)
    set(neon ON)
  else()
    set(portable_only ON)
  endif()
  add_library(modelfs_blake3 STATIC ${sources})
  target_include_directories(modelfs_blake3 SYSTEM PUBLIC $<BUILD_INTERFACE:${dir}>)
  set_target_properties(modelfs_blake3 PROPERTIES POSITION_INDEPENDENT_CODE ON)
  if(neon)
    target_compile_definitions(modelfs_blake3 PRIVATE BLAKE3_USE_NEON=1)
  endif()
  if(portable_only)
    target_compile_definitions(modelfs_blake3 PRIVATE BLAKE3_NO_SSE2 BLAKE3_NO_SSE41
                                                      BLAKE3_NO_AVX2 BLAKE3_NO_AVX512)
  endif()
  message(STATUS "modelfs: BLAKE3 built from ${dir}")
endif()
