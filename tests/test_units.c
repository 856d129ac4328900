/* test_units.c - spec/units.c and spec/sha256.c: the spelling of numbers,
 * booleans, durations and device lists, and the spec hash. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "spec.h"
#include "suites.h"
#include "units.h"

START_TEST(test_int64_forms)
{
    int64_t v;
    ck_assert_int_eq(units_int64("64", &v), 0);
    ck_assert_int_eq(v, 64);
    ck_assert_int_eq(units_int64("-1", &v), 0);
    ck_assert_int_eq(v, -1);
    ck_assert_int_eq(units_int64("+7", &v), 0);
    ck_assert_int_eq(v, 7);
    ck_assert_int_eq(units_int64("1_000_000", &v), 0);
    ck_assert_int_eq(v, 1000000);
    ck_assert_int_eq(units_int64("0x10", &v), 0);
    ck_assert_int_eq(v, 16);
    ck_assert_int_eq(units_int64("0o17", &v), 0);
    ck_assert_int_eq(v, 15);
    ck_assert_int_eq(units_int64("1e6", &v), 0);
    ck_assert_int_eq(v, 1000000);
    ck_assert_int_eq(units_int64("64.0", &v), 0);
    ck_assert_int_eq(v, 64);
    ck_assert_int_eq(units_int64("9223372036854775807", &v), 0);
    ck_assert(v == INT64_MAX);
    /* never a silent prefix or a silent 0 */
    const char *bad[] = { "", "abc", "64abc", "1.5", " 64", "64 ", "--1", "0x", "_1",
                          "9223372036854775808", "1e400", "nan", "inf", "+", "0xg" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(units_int64(bad[i], &v) < 0, "'%s' parsed as an integer", bad[i]);
}
END_TEST

START_TEST(test_double_forms)
{
    double d;
    ck_assert_int_eq(units_double("0.001", &d), 0);
    ck_assert(d == 0.001);
    ck_assert_int_eq(units_double("1e-8", &d), 0);
    ck_assert(d == 1e-8);
    ck_assert_int_eq(units_double("-2.5", &d), 0);
    ck_assert(d == -2.5);
    ck_assert_int_eq(units_double(".5", &d), 0);
    ck_assert(d == 0.5);
    const char *bad[] = { "", "inf", "nan", "-inf", ".inf", "0x1p3", "1.0.0", "1e", "e5",
                          " 1", "1 ", "1e999", "abc" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(units_double(bad[i], &d) < 0, "'%s' parsed as a number", bad[i]);
}
END_TEST

/* Numbers on a command line or in the environment: decimal only (strtod
 * took "0x10" as 16 and strtol " 5" as 5), in range. */
START_TEST(test_flag_numbers)
{
    int64_t v;
    double d;
    ck_assert_int_eq(units_flag_int("42", 0, 100, &v), 0);
    ck_assert_int_eq(v, 42);
    ck_assert_int_eq(units_flag_int("-3", -5, 5, &v), 0);
    ck_assert_int_eq(v, -3);
    const char *bad_int[] = { "", "0x10", "0o7", "0b1", "1_000", " 5", "5 ", "+", "-", "5a",
                              "1e3", "101", "99999999999999999999" };
    for (size_t i = 0; i < sizeof bad_int / sizeof bad_int[0]; i++)
        ck_assert_msg(units_flag_int(bad_int[i], 0, 100, &v) < 0, "'%s' taken", bad_int[i]);
    ck_assert_int_eq(units_flag_double("0.8", 0, HUGE_VAL, &d), 0);
    ck_assert(d == 0.8);
    ck_assert_int_eq(units_flag_double("1e-3", 0, 1, &d), 0);
    ck_assert(d == 1e-3);
    const char *bad_dbl[] = { "0x10", "0X1p4", "inf", "nan", "infinity", " 1", "1 ", "-1", "2",
                              "" };
    for (size_t i = 0; i < sizeof bad_dbl / sizeof bad_dbl[0]; i++)
        ck_assert_msg(units_flag_double(bad_dbl[i], 0, 1.5, &d) < 0, "'%s' taken", bad_dbl[i]);
}
END_TEST

START_TEST(test_bool_yaml11)
{
    int b;
    const char *yes[] = { "true", "True", "TRUE", "yes", "Yes", "on", "ON" };
    const char *no[] = { "false", "False", "no", "NO", "off", "Off" };
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        ck_assert_int_eq(units_bool(yes[i], &b), 0);
        ck_assert_int_eq(b, 1);
    }
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        ck_assert_int_eq(units_bool(no[i], &b), 0);
        ck_assert_int_eq(b, 0);
    }
    ck_assert_int_lt(units_bool("1", &b), 0);
    ck_assert_int_lt(units_bool("y", &b), 0);
    ck_assert_int_lt(units_bool("tRUE", &b), 0);
    ck_assert_int_lt(units_bool("", &b), 0);
}
END_TEST

START_TEST(test_durations)
{
    static const struct { const char *s; double secs; } ok[] = {
        { "90", 90 }, { "1.5", 1.5 }, { "90s", 90 }, { "30m", 1800 }, { "1h30m", 5400 },
        { "1h 30m", 5400 }, { "1.5h", 5400 }, { "2d", 172800 }, { "500ms", 0.5 },
        { "1m30s", 90 }, { "1h0m1s", 3601 }, { "1:30:00", 5400 }, { "0:00:30.5", 30.5 },
        { "5:00", 300 }, { "1 day, 2:00:00", 93600 }, { "2 days, 0:00:01", 172801 },
        { "3 days", 259200 },
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        double v = -1;
        const char *why = NULL;
        ck_assert_msg(units_duration(ok[i].s, &v, &why) == 0, "'%s' rejected: %s", ok[i].s, why);
        ck_assert_msg(fabs(v - ok[i].secs) < 1e-9, "'%s' = %g, want %g", ok[i].s, v, ok[i].secs);
    }
    const char *bad[] = { "", "0", "-5", "-5m", "10x", "m30", "30m1h", "1h1h", "1:75", "1:2:3:4",
                          "1:30:", ":30", "1 day,2:00:00", "1.5 days, 1:00:00", "0s", "h",
                          "1e3m", "inf", "nan", "1 ", " 1" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        double v;
        const char *why = NULL;
        ck_assert_msg(units_duration(bad[i], &v, &why) < 0, "'%s' accepted as %g", bad[i], v);
        ck_assert_ptr_nonnull(why);
    }
    double v;
    const char *why;
    ck_assert_int_lt(units_duration("-5", &v, &why), 0);
    ck_assert_str_eq(why, "a duration must be positive");
}
END_TEST

START_TEST(test_devices_strings)
{
    int32_t idx[64];
    int n, all;
    char why[160];
    ck_assert_int_eq(units_devices("0,1", idx, &n, &all, 64, why, sizeof why), 0);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(idx[0], 0);
    ck_assert_int_eq(idx[1], 1);
    ck_assert_int_eq(all, 0);
    ck_assert_int_eq(units_devices("2, 3", idx, &n, &all, 64, why, sizeof why), 0);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(idx[0], 2);
    ck_assert_int_eq(idx[1], 3);
    /* Lightning: "1," is index 1, "3" is a count */
    ck_assert_int_eq(units_devices("1,", idx, &n, &all, 64, why, sizeof why), 0);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(idx[0], 1);
    ck_assert_int_eq(units_devices("3", idx, &n, &all, 64, why, sizeof why), 0);
    ck_assert_int_eq(n, 3);
    ck_assert_int_eq(idx[2], 2);
    ck_assert_int_eq(units_devices("all", idx, &n, &all, 64, why, sizeof why), 0);
    ck_assert_int_eq(all, 1);
    ck_assert_int_eq(units_devices("-1", idx, &n, &all, 64, why, sizeof why), 0);
    ck_assert_int_eq(all, 1);
    ck_assert_int_eq(units_devices("64", idx, &n, &all, 64, why, sizeof why), 0);
    ck_assert_int_eq(n, 64);

    ck_assert_int_lt(units_devices("0,0", idx, &n, &all, 64, why, sizeof why), 0);
    ck_assert_str_eq(why, "device 0 is listed twice");
    ck_assert_int_lt(units_devices("0,64", idx, &n, &all, 64, why, sizeof why), 0);
    ck_assert_str_eq(why, "device index 64 out of range [0, 64)");
    ck_assert_int_lt(units_devices("0,-1", idx, &n, &all, 64, why, sizeof why), 0);
    ck_assert_int_lt(units_devices("0", idx, &n, &all, 64, why, sizeof why), 0);
    ck_assert_int_lt(units_devices("65", idx, &n, &all, 64, why, sizeof why), 0);
    ck_assert_int_lt(units_devices("", idx, &n, &all, 64, why, sizeof why), 0);
    ck_assert_int_lt(units_devices(",", idx, &n, &all, 64, why, sizeof why), 0);
    ck_assert_int_lt(units_devices("0,,1", idx, &n, &all, 64, why, sizeof why), 0);
    ck_assert_int_lt(units_devices("gpu", idx, &n, &all, 64, why, sizeof why), 0);
    ck_assert_int_lt(units_devices("0,x", idx, &n, &all, 64, why, sizeof why), 0);
    ck_assert_str_eq(why, "device index 'x' is not an integer");
}
END_TEST

START_TEST(test_sha256_vectors)
{
    char hex[65];
    spec_sha256_hex("", 0, hex);
    ck_assert_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    spec_sha256_hex("abc", 3, hex);
    ck_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";   /* 56 bytes */
    spec_sha256_hex(two, strlen(two), hex);
    ck_assert_str_eq(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    static char million[1000000];
    memset(million, 'a', sizeof million);
    spec_sha256_hex(million, sizeof million, hex);
    ck_assert_str_eq(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}
END_TEST

Suite *units_suite(void)
{
    Suite *s = suite_create("units");
    TCase *tc = tcase_create("units");
    tcase_add_test(tc, test_int64_forms);
    tcase_add_test(tc, test_double_forms);
    tcase_add_test(tc, test_flag_numbers);
    tcase_add_test(tc, test_bool_yaml11);
    tcase_add_test(tc, test_durations);
    tcase_add_test(tc, test_devices_strings);
    tcase_add_test(tc, test_sha256_vectors);
    suite_add_tcase(s, tc);
    return s;
}
