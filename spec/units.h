/* units.h - scalar text -> numbers: integers, floats, YAML 1.1 booleans,
 * durations and device lists.
 *
 * Pure functions over NUL-terminated strings: no YAML, no positions, no
 * allocation. Numbers go through strtoll/strtod with their end pointer, so
 * "64abc" is an error and never a silent 64. Each returns 0 on success and
 * -1 on failure; where a reason helps, *why gets a static string.
 */
#ifndef DDPC_UNITS_H
#define DDPC_UNITS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Decimal with optional sign and '_' separators, 0x/0o/0b prefixes, or a
 * float literal with an exact integer value ("1e6", "64.0"). */
int units_int64(const char *s, int64_t *out);
/* A finite decimal float (strtod syntax without inf/nan/hex). */
int units_double(const char *s, double *out);
/* Numbers given on a command line or in the environment (./job's flags,
 * DDPC_* variables, a --master port): an optional sign and decimal digits
 * only, in [lo, hi]. No blanks, no '_', no 0x/0o/0b (a spec's YAML 1.1
 * integers take those; a flag's 0x10 is a typo, not 16). */
int units_flag_int(const char *s, int64_t lo, int64_t hi, int64_t *out);
/* The same for a float: units_double's spelling (decimal, finite: no
 * "inf", "nan", hex floats or blanks), in [lo, hi]. */
int units_flag_double(const char *s, double lo, double hi, double *out);
/* true/false, yes/no, on/off in lower, Title or UPPER case. */
int units_bool(const char *s, int *out);
/* A positive duration in seconds: "90" (bare number = seconds), "90s",
 * "30m", "1h30m", "1.5h", "500ms", "2d", "1:30:00", "0:00:30.5",
 * "1 day, 2:00:00" / "3 days, 0:10:00" (Python timedelta's str()). */
int units_duration(const char *s, double *seconds, const char **why);

/* Device list as written in a string: "0,1" (indices; "1," is index 1),
 * "2" (a count, as in Lightning: indices 0..1), "-1", "all" or "auto" (every
 * device). Fills idx[0..*n) (at most max) or sets *all. Checks indices are
 * in [0, max) and unique; on failure writes the reason into why. */
int units_devices(const char *s, int32_t *idx, int *n, int *all, int max, char *why,
                  size_t whycap);

#ifdef __cplusplus
}
#endif

#endif /* DDPC_UNITS_H */
