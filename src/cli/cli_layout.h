/* The pipeline-layout flags that `train` and `grad` share (--stages, --dp, --schedule, ...), and
 * turning them into a run: defaults, and the MPI world for --transport mpi. */
#ifndef PT_CLI_LAYOUT_H
#define PT_CLI_LAYOUT_H
#include "cli/cli.h"
#include "comm/comm.h"
#include "run/run.h"

#define CLI_LAYOUT_N_OPTS 21
#define CLI_UNSET (-2147483647 - 1)   /* --stages/--dp/--tp/--microbatches not given */

/* Marks --stages, --dp, --tp and --microbatches as not given (so an explicit 0 is an error, not the
 * default). Call before cli_parse. */
void cli_layout_init(run_opts *ro);

/* Writes the CLI_LAYOUT_N_OPTS layout flags into out[], bound to ro, *transport and *split_text
 * (--split as given; cli_layout_split turns it into ro's counts). --slow-link and --slow-stage are
 * listed for --help only: cli_layout_take_faults takes them out of argv before cli_parse. */
void cli_layout_opts(cli_opt *out, run_opts *ro, const char **transport, const char **split_text);
/* --split text ("3,5,4,4": blocks per chunk) into counts: *split gets a malloc'd array (the
 * caller frees it) of *n counts, or NULL when text is NULL (even split). Checks the form only
 * (numbers joined by single commas, none at either end; each >= 1); whether they fit the model
 * and the layout is run_layout_init's to say. -1 with an error naming the flag and the text. */
int cli_layout_split(const char *text, int **split, int *n);
/* Takes the repeatable --slow-link and --slow-stage ("--x V" or "--x=V"; cli_parse has no lists)
 * out of argv into ro->slow_link / slow_stage (arrays allocated here: free them with
 * cli_layout_faults_free); argv keeps the rest in order and *argc shrinks. -1 with an error when
 * a value is missing. */
int cli_layout_take_faults(int *argc, char **argv, run_opts *ro);
void cli_layout_faults_free(run_opts *ro);
/* The transport to use: the one given, else "mpi" when this process was started by mpirun with
 * more than one process (OMPI_COMM_WORLD_SIZE or PMI_SIZE > 1), else NULL (threads). So
 * `mpirun -np 8 pipetrain train ... --stages 4 --dp 2` just works. */
const char *cli_layout_transport(const char *given);
/* 1 when any layout flag was given (the run is pipelined), else 0. */
int cli_layout_given(const run_opts *ro, const char *transport);
/* Without layout flags: clears the marks (P = D = M = tp = 0: the single-process path) and
 * returns 0. For a pipelined run: checks the numbers given (>= 1), fills the defaults (P = D =
 * tp = 1, schedule 1f1b, M = P) and starts the transport (comm_transport_find): a world transport
 * (mpi) initialises and sets *world; an in-process one (threads, or one registered) is named in
 * ro->transport for the job and *world is NULL.
 * -1 with an error naming the flag. */
int cli_layout_start(run_opts *ro, const char *transport, int *argc, char ***argv, comm **world);
/* The end of a run that cli_layout_start began: frees world (NULL: nothing) and ends its
 * transport's world (MPI_Finalize). */
void cli_layout_stop(const char *transport, comm *world);

#endif
