/* check.h - `ddpc check` and `ddpc schema`, called by compiler/main.c.
 *
 * Both take the subcommand's own argv: argv[0] is the subcommand name
 * ("check"), options and files follow. They return the exit status and
 * never call exit():
 *   check: 0 every file valid (warnings allowed), 1 some file invalid (or a
 *          warning under --strict), 2 usage or I/O error.
 *   schema: 0, or 2 on a usage error.
 */
#ifndef DDPC_CHECK_H
#define DDPC_CHECK_H

int cmd_check(int argc, char **argv);

/* The --set KEY.PATH=VALUE options of check, plan and build. */
#define CLI_MAX_SETS 64
struct cli_sets {
    const char *v[CLI_MAX_SETS];    /* "key.path=value", pointing into argv */
    int n;
};
/* If argv[*i] is "--set K=V" or "--set=K=V": appends K=V to sets, advances
 * *i past it and returns 1; returns 0 when it is another argument, and -1
 * (after saying why on stderr) when the value is missing or has no '=', or
 * there are more than CLI_MAX_SETS. cmd names the subcommand in the message. */
int cli_take_set(int argc, char **argv, int *i, const char *cmd, struct cli_sets *sets);
int cmd_schema(int argc, char **argv);

#endif /* DDPC_CHECK_H */
