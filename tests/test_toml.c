/* The TOML C API over toml++: values and their positions, source order, errors with positions, and
 * --set overrides. */
#define _POSIX_C_SOURCE 200809L

#include "test_util.h"

#include "config/toml.h"

#include <stdlib.h>
#include <unistd.h>

static bk_toml *parse(const char *text)
{
    bk_toml *doc = NULL;
    bk_error err;
    if (bk_toml_parse_string(text, "t.toml", &doc, &err) != BK_OK)
        fail_msg("unexpected parse error: %s", err.message);
    return doc;
}

static void values_types_and_positions(void **state)
{
    (void)state;
    bk_toml *doc = parse("top = 1\n[model]\nheads = 12\nrate = 2.5e-4\nname = \"gpt\"\nfast = true\n"
                         "when = 2026-11-22\nlist = [1, 2.5, \"x\"]\n");
    const bk_toml_node *root = bk_toml_root(doc);
    assert_int_equal(bk_toml_type_of(root), BK_TOML_TABLE);
    assert_int_equal(bk_toml_count(root), 2);
    const bk_toml_node *model = bk_toml_get(root, "model");
    assert_int_equal(bk_toml_type_of(model), BK_TOML_TABLE);
    const bk_toml_node *heads = bk_toml_get(model, "heads");
    assert_int_equal(bk_toml_type_of(heads), BK_TOML_INT);
    assert_int_equal(bk_toml_int(heads), 12);
    assert_true(bk_toml_float(heads) == 12.0); /* an integer reads as a float too */
    bk_toml_pos p = bk_toml_position(heads);
    assert_string_equal(p.source, "t.toml");
    assert_int_equal(p.line, 3);
    assert_int_equal(p.column, 9);
    p = bk_toml_key_position(model, "heads");
    assert_int_equal(p.line, 3);
    assert_int_equal(p.column, 1);
    assert_true(bk_toml_float(bk_toml_get(model, "rate")) == 2.5e-4);
    assert_string_equal(bk_toml_string(bk_toml_get(model, "name")), "gpt");
    assert_int_equal(bk_toml_bool(bk_toml_get(model, "fast")), 1);
    assert_int_equal(bk_toml_type_of(bk_toml_get(model, "when")), BK_TOML_DATE);
    assert_string_equal(bk_toml_type_name(BK_TOML_DATE), "date");
    const bk_toml_node *list = bk_toml_get(model, "list");
    assert_int_equal(bk_toml_type_of(list), BK_TOML_ARRAY);
    assert_int_equal(bk_toml_count(list), 3);
    assert_int_equal(bk_toml_type_of(bk_toml_at(list, 1)), BK_TOML_FLOAT);
    assert_int_equal(bk_toml_position(bk_toml_at(list, 2)).column, 17);
    assert_null(bk_toml_at(list, 3));
    assert_null(bk_toml_get(model, "nope"));
    assert_null(bk_toml_get(heads, "x")); /* not a table */
    bk_toml_free(doc);
}

static void entries_come_in_source_order(void **state)
{
    (void)state;
    bk_toml *doc = parse("zeta = 1\nalpha = 2\nmid = 3\n");
    const char *want[] = {"zeta", "alpha", "mid"};
    bk_toml_entry e;
    size_t i = 0;
    for (; bk_toml_entry_at(bk_toml_root(doc), i, &e) == 0; i++) {
        assert_string_equal(e.key, want[i]);
        assert_int_equal(e.key_pos.line, i + 1);
    }
    assert_int_equal(i, 3);
    bk_toml_free(doc);
}

static void array_of_tables(void **state)
{
    (void)state;
    bk_toml *doc = parse("[[term]]\nplugin = \"a\"\n[[term]]\nplugin = \"b\"\nweight = 2\n");
    const bk_toml_node *terms = bk_toml_get(bk_toml_root(doc), "term");
    assert_int_equal(bk_toml_count(terms), 2);
    assert_string_equal(bk_toml_string(bk_toml_get(bk_toml_at(terms, 1), "plugin")), "b");
    assert_int_equal(bk_toml_key_position(bk_toml_at(terms, 1), "weight").line, 5);
    bk_toml_free(doc);
}

static void bad_toml_names_file_line_and_column(void **state)
{
    (void)state;
    bk_toml *doc = NULL;
    bk_error err;
    assert_int_equal(bk_toml_parse_string("[model]\nheads = = 3\n", "bad.toml", &doc, &err), BK_ERR_PARSE);
    assert_null(doc);
    assert_message_has(err.message, "bad.toml:2:");
    assert_message_has(err.message, ": invalid TOML: ");
    assert_int_equal(bk_toml_parse_string("a = 1\na = 2\n", "dup.toml", &doc, &err), BK_ERR_PARSE);
    assert_message_has(err.message, "dup.toml:2:5: invalid TOML: ");
    assert_message_has(err.message, "cannot redefine existing integer 'a'");
    assert_int_equal(bk_toml_parse_string("s = \"open\n", "str.toml", &doc, &err), BK_ERR_PARSE);
    assert_message_has(err.message, "str.toml:1:");
}

static void missing_file(void **state)
{
    (void)state;
    bk_toml *doc = NULL;
    bk_error err;
    assert_int_equal(bk_toml_parse_file("/nonexistent/exp.toml", &doc, &err), BK_ERR_IO);
    assert_string_equal(err.message, "cannot read '/nonexistent/exp.toml': No such file or directory");
}

static void parses_a_file(void **state)
{
    (void)state;
    char path[] = "/tmp/bk_test_toml_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char text[] = "[run]\nseed = 7\n";
    assert_int_equal(write(fd, text, sizeof text - 1), (ssize_t)(sizeof text - 1));
    close(fd);
    bk_toml *doc = NULL;
    bk_error err;
    assert_int_equal(bk_toml_parse_file(path, &doc, &err), BK_OK);
    const bk_toml_node *seed = bk_toml_get(bk_toml_get(bk_toml_root(doc), "run"), "seed");
    assert_int_equal(bk_toml_int(seed), 7);
    assert_string_equal(bk_toml_position(seed).source, path);
    bk_toml_free(doc);
    unlink(path);
}

static void overrides(void **state)
{
    (void)state;
    bk_toml *doc = parse("[model]\nheads = 8\n[[term]]\nplugin = \"alibi\"\n");
    bk_error err;
    const bk_toml_node *root = bk_toml_root(doc);
    /* replace a value; the new value names the override */
    assert_int_equal(bk_toml_override(doc, "model.heads=12", &err), BK_OK);
    const bk_toml_node *heads = bk_toml_get(bk_toml_get(root, "model"), "heads");
    assert_int_equal(bk_toml_int(heads), 12);
    assert_string_equal(bk_toml_position(heads).source, "--set model.heads=12");
    assert_int_equal(bk_toml_position(heads).column, 13);
    /* new tables are created on the way; TOML values keep their types */
    assert_int_equal(bk_toml_override(doc, "train.lr = 3e-4", &err), BK_OK);
    assert_true(bk_toml_float(bk_toml_get(bk_toml_get(root, "train"), "lr")) == 3e-4);
    assert_int_equal(bk_toml_override(doc, "train.tags=[\"a\", \"b\"]", &err), BK_OK);
    assert_int_equal(bk_toml_count(bk_toml_get(bk_toml_get(root, "train"), "tags")), 2);
    /* a word that is not a TOML value is a bare string */
    assert_int_equal(bk_toml_override(doc, "attention.mixing=kernel", &err), BK_OK);
    const bk_toml_node *mixing = bk_toml_get(bk_toml_get(root, "attention"), "mixing");
    assert_int_equal(bk_toml_type_of(mixing), BK_TOML_STRING);
    assert_string_equal(bk_toml_string(mixing), "kernel");
    /* array elements by index */
    assert_int_equal(bk_toml_override(doc, "term.0.slope_scale=96.0", &err), BK_OK);
    const bk_toml_node *term0 = bk_toml_at(bk_toml_get(root, "term"), 0);
    assert_true(bk_toml_float(bk_toml_get(term0, "slope_scale")) == 96.0);
    assert_int_equal(bk_toml_override(doc, "train.tags.1=c", &err), BK_OK);
    assert_string_equal(bk_toml_string(bk_toml_at(bk_toml_get(bk_toml_get(root, "train"), "tags"), 1)), "c");
    bk_toml_free(doc);
}

static void bad_overrides(void **state)
{
    (void)state;
    bk_toml *doc = parse("[model]\nheads = 8\n[[term]]\nplugin = \"alibi\"\n");
    bk_error err;
    assert_int_equal(bk_toml_override(doc, "model.heads", &err), BK_ERR_USAGE);
    assert_string_equal(err.message, "--set 'model.heads': expected KEY=VALUE, e.g. model.heads=8");
    assert_int_equal(bk_toml_override(doc, "=3", &err), BK_ERR_USAGE);
    assert_message_has(err.message, "the key before '=' is empty");
    assert_int_equal(bk_toml_override(doc, "model.heads=", &err), BK_ERR_USAGE);
    assert_message_has(err.message, "the value after '=' is empty");
    assert_int_equal(bk_toml_override(doc, "model..heads=3", &err), BK_ERR_USAGE);
    assert_message_has(err.message, "empty key segment in 'model..heads'");
    assert_int_equal(bk_toml_override(doc, "term.3.weight=2", &err), BK_ERR_USAGE);
    assert_string_equal(err.message, "--set 'term.3.weight=2': index 3 is out of range: 'term' has 1 element");
    assert_int_equal(bk_toml_override(doc, "term.first.weight=2", &err), BK_ERR_USAGE);
    assert_message_has(err.message, "'term' is an array: expected an element index, got 'first'");
    assert_int_equal(bk_toml_override(doc, "model.heads.x=2", &err), BK_ERR_USAGE);
    assert_message_has(err.message, "'model.heads' is an integer, not a table or array, so it has no 'x'");
    bk_toml_free(doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(values_types_and_positions),
        cmocka_unit_test(entries_come_in_source_order),
        cmocka_unit_test(array_of_tables),
        cmocka_unit_test(bad_toml_names_file_line_and_column),
        cmocka_unit_test(missing_file),
        cmocka_unit_test(parses_a_file),
        cmocka_unit_test(overrides),
        cmocka_unit_test(bad_overrides),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
