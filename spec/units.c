/* units.c - scalar text -> numbers, booleans, durations, device lists.
 *
 * Owns the spelling of values (see units.h); never knows which key a value
 * belongs to. strtoll/strtod with end pointers only: atoi would turn "abc"
 * into 0 and "64k" into 64.
 */
#include "units.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int units_int64(const char *s, int64_t *out)
{
    char buf[64];
    size_t o = 0;
    /* drop YAML 1.1 '_' digit separators ("1_000_000") */
    for (const char *p = s; *p; p++) {
        if (*p == '_')
            continue;
        if (o + 1 >= sizeof buf)
            return -1;
        buf[o++] = *p;
    }
    buf[o] = '\0';
    if (o == 0 || s[0] == '_' || buf[0] == ' ' || buf[0] == '\t')
        return -1;
    const char *p = buf;
    int neg = 0, base = 10;
    if (*p == '+' || *p == '-')
        neg = *p++ == '-';
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X'))
        base = 16, p += 2;
    else if (p[0] == '0' && (p[1] == 'o' || p[1] == 'O'))
        base = 8, p += 2;
    else if (p[0] == '0' && (p[1] == 'b' || p[1] == 'B'))
        base = 2, p += 2;
    if (*p == '\0' || *p == '+' || *p == '-')
        return -1;
    char *end;
    errno = 0;
    unsigned long long u = strtoull(p, &end, base);
    if (*end == '\0' && errno == 0) {
        if (neg ? u > (unsigned long long)INT64_MAX + 1 : u > (unsigned long long)INT64_MAX)
            return -1;
        *out = neg ? (u == (unsigned long long)INT64_MAX + 1 ? INT64_MIN : -(int64_t)u)
                   : (int64_t)u;
        return 0;
    }
    /* "1e6", "64.0": a float literal holding an exact integer */
    double d;
    if (base != 10 || units_double(s, &d) < 0 || d != floor(d) || fabs(d) > 9.0e15)
        return -1;
    *out = (int64_t)d;
    return 0;
}

int units_double(const char *s, double *out)
{
    /* strtod also takes "inf", "nan", hex floats and leading blanks; a spec
     * means none of them */
    const char *p = s;
    if (*p == '+' || *p == '-')
        p++;
    if (!(*p >= '0' && *p <= '9') && !(*p == '.' && p[1] >= '0' && p[1] <= '9'))
        return -1;
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X'))
        return -1;
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    if (*end != '\0' || !isfinite(d) || (errno == ERANGE && fabs(d) > 1.0))
        return -1;
    *out = d;
    return 0;
}

int units_flag_int(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    const char *p = s + (*s == '+' || *s == '-');
    if (!(*p >= '0' && *p <= '9'))
        return -1;
    for (const char *q = p; *q; q++)
        if (!(*q >= '0' && *q <= '9'))
            return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = (int64_t)v;
    return 0;
}

int units_flag_double(const char *s, double lo, double hi, double *out)
{
    double v;
    if (units_double(s, &v) < 0 || !(v >= lo && v <= hi))
        return -1;
    *out = v;
    return 0;
}

int units_bool(const char *s, int *out)
{
    static const char *const yes[] = { "true", "True", "TRUE", "yes", "Yes", "YES",
                                       "on", "On", "ON" };
    static const char *const no[] = { "false", "False", "FALSE", "no", "No", "NO",
                                      "off", "Off", "OFF" };
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (strcmp(s, yes[i]) == 0) {
            *out = 1;
            return 0;
        }
        if (strcmp(s, no[i]) == 0) {
            *out = 0;
            return 0;
        }
    }
    return -1;
}

/* Reads an unsigned decimal (digits, optional fraction) at *p. */
static int read_number(const char **p, double *v)
{
    const char *s = *p;
    if (!((*s >= '0' && *s <= '9') || (*s == '.' && s[1] >= '0' && s[1] <= '9')))
        return -1;
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    if (end == s || errno == ERANGE || !isfinite(*v))
        return -1;
    /* digits and one '.' only: strtod would also take an exponent, and
     * "1e3m" is not a duration anyone means ("1e3" alone is bare seconds,
     * read before this) */
    for (const char *q = s; q < end; q++)
        if (!((*q >= '0' && *q <= '9') || *q == '.'))
            return -1;
    *p = end;
    return 0;
}

/* "H:MM:SS[.frac]" or "M:SS" at s (whole string). */
static int clock_form(const char *s, double *out)
{
    double part[3];
    int n = 0;
    const char *p = s;
    for (;;) {
        if (n == 3)
            return -1;
        if (read_number(&p, &part[n]) < 0)
            return -1;
        n++;
        if (*p == ':') {
            p++;
            continue;
        }
        break;
    }
    if (*p != '\0' || n < 2)
        return -1;
    /* all fields but the last are whole numbers; minutes/seconds below 60 */
    for (int i = 0; i < n - 1; i++)
        if (part[i] != floor(part[i]))
            return -1;
    for (int i = 1; i < n; i++)
        if (part[i] >= 60)
            return -1;
    *out = n == 3 ? part[0] * 3600 + part[1] * 60 + part[2] : part[0] * 60 + part[1];
    return 0;
}

int units_duration(const char *s, double *seconds, const char **why)
{
    static const char *const syntax =
        "expected a duration: seconds (90), 90s, 30m, 1h30m, 1:30:00 or '1 day, 2:00:00'";
    double total = 0, v;
    const char *p = s;
    *why = syntax;
    if (*s == '-') {
        *why = "a duration must be positive";
        return -1;
    }
    /* bare number: seconds */
    if (units_double(s, &v) == 0) {
        if (v <= 0) {
            *why = "a duration must be positive";
            return -1;
        }
        *seconds = v;
        return 0;
    }
    /* "N day(s), H:MM:SS" */
    const char *comma = strstr(s, " day");
    if (comma) {
        if (read_number(&p, &v) < 0 || v != floor(v) || p != comma)
            return -1;
        p = comma + 4;
        if (*p == 's')
            p++;
        if (*p == '\0') {
            total = v * 86400;
            goto done;
        }
        if (p[0] != ',' || p[1] != ' ')
            return -1;
        double rest;
        if (clock_form(p + 2, &rest) < 0)
            return -1;
        total = v * 86400 + rest;
        goto done;
    }
    if (strchr(s, ':')) {
        if (clock_form(s, &total) < 0)
            return -1;
        goto done;
    }
    /* unit sequence: 1d2h30m10s500ms, each unit at most once, largest first */
    {
        static const struct { const char *u; double mult; } units[] = {
            { "ms", 0.001 }, { "d", 86400 }, { "h", 3600 }, { "m", 60 }, { "s", 1 },
        };
        int last_rank = -1;
        while (*p) {
            if (read_number(&p, &v) < 0)
                return -1;
            int rank = -1;
            double mult = 0;
            size_t ul = 0;
            for (int i = 0; i < 5; i++) {
                size_t l = strlen(units[i].u);
                if (strncmp(p, units[i].u, l) == 0) {
                    /* rank: d=0 h=1 m=2 s=3 ms=4, so "ms" sorts after "s" */
                    rank = i == 0 ? 4 : i - 1;
                    mult = units[i].mult;
                    ul = l;
                    break;
                }
            }
            if (rank < 0 || rank <= last_rank)
                return -1;
            last_rank = rank;
            total += v * mult;
            p += ul;
            if (*p == ' ')
                p++;
        }
    }
done:
    if (!(total > 0) || !isfinite(total)) {
        *why = "a duration must be positive";
        return -1;
    }
    *seconds = total;
    return 0;
}

int units_devices(const char *s, int32_t *idx, int *n, int *all, int max, char *why,
                  size_t whycap)
{
    int64_t v;
    *n = 0;
    *all = 0;
    /* "auto" as Lightning writes it: every device of the accelerator */
    if (strcmp(s, "all") == 0 || strcmp(s, "-1") == 0 || strcmp(s, "auto") == 0) {
        *all = 1;
        return 0;
    }
    if (!strchr(s, ',')) {
        /* a count, as Lightning reads devices="2" */
        if (units_int64(s, &v) < 0) {
            snprintf(why, whycap, "expected a device count, a list like \"0,1\", -1, \"all\" or \"auto\"; "
                     "found '%s'", s);
            return -1;
        }
        if (v < 1 || v > max) {
            snprintf(why, whycap, "device count must be between 1 and %d (or -1 for all), "
                     "found %lld", max, (long long)v);
            return -1;
        }
        for (int i = 0; i < (int)v; i++)
            idx[i] = i;
        *n = (int)v;
        return 0;
    }
    const char *p = s;
    while (*p) {
        char tok[32];
        size_t l = strcspn(p, ",");
        while (l && p[0] == ' ')
            p++, l--;
        size_t tl = l;
        while (tl && p[tl - 1] == ' ')
            tl--;
        if (tl == 0 || tl >= sizeof tok) {
            if (tl == 0 && p[l] == '\0' && *n > 0)
                break;   /* trailing comma: "1," */
            snprintf(why, whycap, "empty or malformed entry in device list '%s'", s);
            return -1;
        }
        memcpy(tok, p, tl);
        tok[tl] = '\0';
        if (units_int64(tok, &v) < 0) {
            snprintf(why, whycap, "device index '%s' is not an integer", tok);
            return -1;
        }
        if (v < 0 || v >= max) {
            snprintf(why, whycap, "device index %lld out of range [0, %d)", (long long)v, max);
            return -1;
        }
        for (int i = 0; i < *n; i++)
            if (idx[i] == v) {
                snprintf(why, whycap, "device %lld is listed twice", (long long)v);
                return -1;
            }
        if (*n == max) {
            snprintf(why, whycap, "more than %d devices", max);
            return -1;
        }
        idx[(*n)++] = (int32_t)v;
        p += l;
        if (*p == ',')
            p++;
    }
    if (*n == 0) {
        snprintf(why, whycap, "empty device list");
        return -1;
    }
    return 0;
}
