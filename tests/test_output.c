/* The files commands write (util/output.h): an output that is an input is refused (the same inode,
 * through a symbolic or a hard link too); a regular file is replaced atomically (a temporary file
 * renamed over it: a reader never sees a half-written file, and a failure leaves the old file and no
 * temporary file); devices and FIFOs are written directly with every write checked. */
#define _DEFAULT_SOURCE
#include "test_util.h"

#include "util/output.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/bk_test_output_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void path_in(char *out, size_t size, const char *name)
{
    snprintf(out, size, "%s/%s", dir, name);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static void assert_file_is(const char *path, const char *want)
{
    char text[4096] = "";
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("cannot read %s", path);
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    assert_string_equal(text, want);
}

/* How many entries of the test directory have ".tmp" in their name. */
static int temporaries(void)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strstr(e->d_name, ".tmp") != NULL;
    closedir(d);
    return n;
}

static void an_input_is_refused_by_path_symlink_and_hard_link(void **state)
{
    (void)state;
    char in[512], sym[512], hard[512], want[2048];
    path_in(in, sizeof in, "model.safetensors");
    path_in(sym, sizeof sym, "sym.csv");
    path_in(hard, sizeof hard, "hard.csv");
    write_file(in, "weights");
    assert_int_equal(symlink(in, sym), 0);
    assert_int_equal(link(in, hard), 0);
    const bk_output_input inputs[] = {{"experiment file", "/nonexistent/exp.toml", NULL, 0},
                                      {"checkpoint", in, NULL, 0}};
    const char *outs[] = {in, sym, hard};
    for (int k = 0; k < 3; k++) {
        bk_output o;
        bk_error err;
        assert_int_equal(bk_output_open(&o, "--csv", outs[k], inputs, 2, &err), BK_ERR_USAGE);
        snprintf(want, sizeof want, "--csv '%s' is the checkpoint '%s' (an input of this command)", outs[k], in);
        assert_message_has(err.message, want);
        assert_int_equal(bk_output_check("--json", outs[k], inputs, 2, &err), BK_ERR_USAGE);
        assert_message_has(err.message, "--json '");
    }
    assert_file_is(in, "weights");
    assert_int_equal(temporaries(), 0);
    /* a file beside an output (a plot's .dat) */
    bk_error err;
    assert_int_equal(bk_output_check_beside("--plot", "x.png", sym, inputs, 2, &err), BK_ERR_USAGE);
    snprintf(want, sizeof want, "--plot 'x.png' writes '%s', which is the checkpoint '%s'", sym, in);
    assert_message_has(err.message, want);
}

static void a_data_directory_protects_the_files_its_reader_takes(void **state)
{
    (void)state;
    char corpus[512], txt[600], csv[600], hidden[600], real[4096];
    path_in(corpus, sizeof corpus, "corpus");
    assert_int_equal(mkdir(corpus, 0777), 0);
    assert_non_null(realpath(corpus, real));
    snprintf(csv, sizeof csv, "%s/ppl.csv", corpus);
    snprintf(hidden, sizeof hidden, "%s/.hidden.txt", corpus);
    snprintf(txt, sizeof txt, "%s/new.txt", corpus);
    const char *const ext[] = {".txt"};
    const bk_output_input text_only = {"data path", corpus, ext, 1}, every = {"data path", corpus, NULL, 0};
    bk_error err;
    assert_int_equal(bk_output_check("--csv", txt, &text_only, 1, &err), BK_ERR_USAGE); /* a new .txt: read next time */
    char want[5000];
    snprintf(want, sizeof want,
             "--csv '%s' lies in the data path '%s', whose files ending in .txt are this command's data", txt, real);
    assert_message_has(err.message, want);
    assert_int_equal(bk_output_check("--csv", csv, &text_only, 1, &err), BK_OK);     /* not a data name */
    assert_int_equal(bk_output_check("--csv", hidden, &text_only, 1, &err), BK_OK);  /* hidden: never read */
    assert_int_equal(bk_output_check("--csv", csv, &every, 1, &err), BK_ERR_USAGE);  /* every name is data */
    assert_message_has(err.message, "(every name not hidden)");
}

static void bad_paths_are_refused(void **state)
{
    (void)state;
    char p[512], fifo[512], dangling[512];
    bk_output o;
    bk_error err;
    assert_int_equal(bk_output_open(&o, "--csv", "", NULL, 0, &err), BK_ERR_USAGE);
    assert_message_has(err.message, "--csv: expected a file name ('-' for standard output), got an empty string");
    assert_int_equal(bk_output_open(&o, "--json", dir, NULL, 0, &err), BK_ERR_USAGE);
    assert_message_has(err.message, "is a directory; expected a file");
    path_in(p, sizeof p, "no/such/dir/x.csv");
    assert_int_equal(bk_output_open(&o, "--csv", p, NULL, 0, &err), BK_ERR_IO);
    assert_message_has(err.message, "No such file or directory");
    path_in(dangling, sizeof dangling, "dangling.csv");
    assert_int_equal(symlink("/nonexistent/target", dangling), 0);
    assert_int_equal(bk_output_open(&o, "--csv", dangling, NULL, 0, &err), BK_ERR_IO);
    assert_message_has(err.message, "symbolic link to a file that does not exist");
    path_in(fifo, sizeof fifo, "fifo");
    assert_int_equal(mkfifo(fifo, 0666), 0);
    assert_int_equal(bk_output_open(&o, "--csv", fifo, NULL, 0, &err), BK_ERR_IO); /* not waited on */
    assert_message_has(err.message, "no process reads this FIFO");
    /* two outputs naming one file, directly or through a link */
    char a[512], link_a[512];
    path_in(a, sizeof a, "a.csv");
    path_in(link_a, sizeof link_a, "link_a.csv");
    write_file(a, "");
    assert_int_equal(symlink("a.csv", link_a), 0);
    const char *flags[] = {"--csv", "--json", "--positions"};
    const char *same[] = {a, NULL, a}, *linked[] = {"-", a, link_a}, *fine[] = {"-", a, NULL};
    const char *two_stdout[] = {"-", a, "-"};
    assert_int_equal(bk_output_check_distinct(flags, same, 3, &err), BK_ERR_USAGE);
    assert_message_has(err.message, "--positions '");
    assert_message_has(err.message, "is the same file as --csv '");
    assert_int_equal(bk_output_check_distinct(flags, linked, 3, &err), BK_ERR_USAGE);
    assert_int_equal(bk_output_check_distinct(flags, fine, 3, &err), BK_OK);
    assert_int_equal(bk_output_check_distinct(flags, two_stdout, 3, &err), BK_ERR_USAGE);
    assert_message_has(err.message, "--csv - and --positions - both name standard output");
}

static void a_file_is_replaced_atomically(void **state)
{
    (void)state;
    char p[512];
    path_in(p, sizeof p, "ppl.csv");
    write_file(p, "old\n");
    assert_int_equal(chmod(p, 0640), 0);
    int reader = open(p, O_RDONLY); /* a reader of the old file */
    assert_true(reader >= 0);
    bk_output o;
    bk_error err;
    assert_int_equal(bk_output_open(&o, "--csv", p, NULL, 0, &err), BK_OK);
    assert_int_equal(o.kind, BK_OUTPUT_ATOMIC);
    assert_int_equal(bk_output_printf(&o, "length,ppl\n%d,%.1f\n", 16, 2.5), 0);
    assert_file_is(p, "old\n"); /* nothing shows before the close */
    assert_int_equal(temporaries(), 1);
    assert_int_equal(bk_output_close(&o, &err), BK_OK);
    assert_file_is(p, "length,ppl\n16,2.5\n");
    assert_int_equal(temporaries(), 0);
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0640); /* the replaced file's mode */
    char old[16] = "";
    assert_int_equal(pread(reader, old, sizeof old - 1, 0), 4); /* a new inode: the old one is intact */
    assert_string_equal(old, "old\n");
    close(reader);
    /* through a symbolic link: the target is replaced, the link stays */
    char link_path[512];
    path_in(link_path, sizeof link_path, "link.csv");
    assert_int_equal(symlink("ppl.csv", link_path), 0);
    assert_int_equal(bk_output_open(&o, "--csv", link_path, NULL, 0, &err), BK_OK);
    bk_output_printf(&o, "via link\n");
    assert_int_equal(bk_output_close(&o, &err), BK_OK);
    assert_int_equal(lstat(link_path, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    assert_file_is(p, "via link\n");
    /* discarded: the target untouched, the temporary file gone */
    assert_int_equal(bk_output_open(&o, "--csv", p, NULL, 0, &err), BK_OK);
    bk_output_printf(&o, "never\n");
    bk_output_discard(&o);
    assert_file_is(p, "via link\n");
    assert_int_equal(temporaries(), 0);
}

static void a_failed_write_leaves_the_old_file_and_no_temporary(void **state)
{
    (void)state;
    char p[512], q[512];
    path_in(p, sizeof p, "big.json");
    path_in(q, sizeof q, "new.json");
    write_file(p, "{\"old\": true}\n");
    struct rlimit saved, small = {4096, 4096};
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &saved), 0);
    small.rlim_max = saved.rlim_max;
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN); /* writes past the limit fail with EFBIG */
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
    bk_output o;
    bk_error err;
    int rc_replace = -1, rc_new = -1;
    char msg_replace[BK_ERROR_MESSAGE_MAX] = "", msg_new[BK_ERROR_MESSAGE_MAX] = "";
    const char *paths[] = {p, q};
    for (int k = 0; k < 2; k++) {
        if (bk_output_open(&o, "--json", paths[k], NULL, 0, &err) == BK_OK) {
            for (int i = 0; i < 2000; i++)
                bk_output_printf(&o, "%d, ", i);
            int rc = bk_output_close(&o, &err);
            *(k ? &rc_new : &rc_replace) = rc;
            bk_copy_text(k ? msg_new : msg_replace, BK_ERROR_MESSAGE_MAX, err.message);
        }
    }
    setrlimit(RLIMIT_FSIZE, &saved);
    signal(SIGXFSZ, old_handler);
    assert_int_equal(rc_replace, BK_ERR_IO);
    assert_message_has(msg_replace, "cannot write --json '");
    assert_message_has(msg_replace, strerror(EFBIG));
    assert_message_has(msg_replace, "(the file is unchanged)");
    assert_int_equal(rc_new, BK_ERR_IO);
    assert_message_has(msg_new, "(no file was created)");
    assert_file_is(p, "{\"old\": true}\n");
    assert_int_equal(access(q, F_OK), -1);
    assert_int_equal(temporaries(), 0);
}

static void a_device_is_written_directly_and_checked(void **state)
{
    (void)state;
    bk_output o;
    bk_error err;
    if (access("/dev/full", W_OK) != 0)
        skip();
    assert_int_equal(bk_output_open(&o, "--csv", "/dev/full", NULL, 0, &err), BK_OK);
    assert_int_equal(o.kind, BK_OUTPUT_DIRECT);
    bk_output_printf(&o, "length,ppl\n");
    assert_int_equal(bk_output_close(&o, &err), BK_ERR_IO);
    assert_message_has(err.message, "cannot write --csv '/dev/full': No space left on device");
    assert_int_equal(bk_output_open(&o, "--csv", "/dev/null", NULL, 0, &err), BK_OK);
    bk_output_printf(&o, "gone\n");
    assert_int_equal(bk_output_close(&o, &err), BK_OK);
}

static void json_strings_are_escaped(void **state)
{
    (void)state;
    char p[512];
    path_in(p, sizeof p, "s.json");
    bk_output o;
    bk_error err;
    assert_int_equal(bk_output_open(&o, "--json", p, NULL, 0, &err), BK_OK);
    assert_int_equal(bk_output_json_string(&o, "a\"b\\c\nd\x01"), 0);
    assert_int_equal(bk_output_close(&o, &err), BK_OK);
    assert_file_is(p, "\"a\\\"b\\\\c\\u000ad\\u0001\"");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(an_input_is_refused_by_path_symlink_and_hard_link, setup, teardown),
        cmocka_unit_test_setup_teardown(a_data_directory_protects_the_files_its_reader_takes, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_paths_are_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(a_file_is_replaced_atomically, setup, teardown),
        cmocka_unit_test_setup_teardown(a_failed_write_leaves_the_old_file_and_no_temporary, setup, teardown),
        cmocka_unit_test_setup_teardown(a_device_is_written_directly_and_checked, setup, teardown),
        cmocka_unit_test_setup_teardown(json_strings_are_escaped, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
