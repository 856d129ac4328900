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
int cmd_schema(int argc, char **argv);

#endif /* DDPC_CHECK_H */
