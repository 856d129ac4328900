/* csv_header.h - pandas' default header: one rule for the job's CSV loader
 * (runtime/data.c), `ddpc check` (validate.c) and `ddpc plan`'s sample count
 * (plan.c).
 *
 * defines: csv_is_column_numbers
 *
 * A CSV's first line is its header when a field is not a number. But
 * pandas.DataFrame(array).to_csv(path, index=False), the usual way a NumPy
 * array becomes a CSV, names the columns 0, 1, ..., k-1: a header of
 * numbers, which read as a sample would train one made-up row (label 0,
 * features 1, 2, ...) without a word. A first line of exactly the column
 * numbers in order is that header. A real sample equal to it would need
 * every feature to be its own column index.
 */
#ifndef DDPC_CSV_HEADER_H
#define DDPC_CSV_HEADER_H

/* 1 when line (one line, without its '\n') is "0,1,2,...,k-1" for k >= 2
 * columns, each field optionally in double quotes and blanks, a trailing
 * '\r' allowed; 0 otherwise. */
static inline int csv_is_column_numbers(const char *line)
{
    const char *p = line;
    long want = 0;
    for (;; want++) {
        while (*p == ' ' || *p == '\t' || *p == '"')
            p++;
        long v = 0;
        const char *d = p;
        while (*p >= '0' && *p <= '9' && v <= 1000000)
            v = v * 10 + (*p++ - '0');
        if (p == d || v != want || (p - d > 1 && *d == '0'))
            return 0;
        while (*p == ' ' || *p == '\t' || *p == '"' || *p == '\r')
            p++;
        if (*p == '\0')
            return want >= 1;
        if (*p++ != ',')
            return 0;
    }
}

#endif /* DDPC_CSV_HEADER_H */
