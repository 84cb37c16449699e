/* scps_version: the library's version (macros for compile time, scps_version()
 * for run time) and SCPS_EXTERN, the mark of every function libscps exports. */
#ifndef SCPS_VERSION_H
#define SCPS_VERSION_H


#ifdef __cplusplus
extern "C" {
#endif
/* The top-level CMakeLists.txt reads these three lines for project(VERSION),
 * the shared library's soname (libscps.so.MAJOR), scps.pc and the CMake
 * package: change the version here only. */
#define SCPS_VERSION_MAJOR 0
#define SCPS_VERSION_MINOR 1
#define SCPS_VERSION_PATCH 0

#define SCPS_VERSION_STRINGIFY_(x) #x
#define SCPS_VERSION_STRINGIFY(x) SCPS_VERSION_STRINGIFY_(x)
/* "MAJOR.MINOR.PATCH" */
#define SCPS_VERSION_STRING                                                                            \
  SCPS_VERSION_STRINGIFY(SCPS_VERSION_MAJOR)                                                           \
  "." SCPS_VERSION_STRINGIFY(SCPS_VERSION_MINOR) "." SCPS_VERSION_STRINGIFY(SCPS_VERSION_PATCH)
/* MAJOR * 10000 + MINOR * 100 + PATCH, for #if comparisons */
#define SCPS_VERSION_NUMBER (SCPS_VERSION_MAJOR * 10000 + SCPS_VERSION_MINOR * 100 + SCPS_VERSION_PATCH)

/* Everything is compiled with -fvisibility=hidden; the functions of the
 * public headers carry SCPS_EXTERN and are the only ones libscps.so exports
 * (cmake/libscps.map lists the same names). */
#ifndef SCPS_EXTERN
#if defined(__GNUC__) || defined(__clang__)
#define SCPS_EXTERN __attribute__((visibility("default")))
#else
#define SCPS_EXTERN
#endif
#endif

/* The version of the library linked at run time, SCPS_VERSION_STRING as it
 * was built; a static string. */
SCPS_EXTERN const char *scps_version(void);

#ifdef __cplusplus
}
#endif

#endif
