// The one C++ file of the engine: the C API of toml.h over toml++ (libtomlplusplus-dev).
//
// toml++ parses; this file copies the result into a small tree of its own (bk_toml_node) that keeps
// every key's and value's source position, lists table entries in the order they were written, and
// can be edited by --set overrides. No C++ exception crosses into C: every entry point catches.
#include "config/toml.h"
#include "util/file.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <list>
#include <memory>
#include <sstream>
#include <string_view>
#include <string>
#include <vector>

struct bk_toml_node;

namespace {

struct entry {
    std::string key;
    bk_toml_pos key_pos;
    std::unique_ptr<bk_toml_node> value;
};

} // namespace

struct bk_toml_node {
    bk_toml_type type = BK_TOML_NONE;
    bk_toml_pos pos = {"", 0, 0};
    int64_t integer = 0;
    double number = 0.0;
    bool boolean = false;
    std::string text;                                    // strings; dates and times as written
    std::vector<entry> entries;                          // tables, in source order
    std::vector<std::unique_ptr<bk_toml_node>> elements; // arrays
};

struct bk_toml {
    std::list<std::string> sources; // interned names that positions point into (stable addresses)
    std::unique_ptr<bk_toml_node> root;

    const char *intern(const std::string &name)
    {
        for (const std::string &s : sources)
            if (s == name)
                return s.c_str();
        sources.push_back(name);
        return sources.back().c_str();
    }
};

namespace {

// Maps a position inside a parsed text to the position reported to the user.
struct position_map {
    const char *source;
    uint32_t line_offset = 0;   // added to lines
    int64_t column_offset = 0;  // added to columns on line 1 only
};

bk_toml_pos make_pos(const toml::source_region &region, const position_map &map)
{
    bk_toml_pos p;
    p.source = map.source;
    p.line = region.begin.line ? region.begin.line + map.line_offset : 0;
    int64_t column = region.begin.column;
    if (region.begin.line == 1 && column > 0)
        column += map.column_offset;
    p.column = column > 0 ? (uint32_t)column : 0;
    return p;
}

// Thrown by convert() at a node nested deeper than BK_TOML_MAX_DEPTH; caught in parse_text().
struct too_deep {
    toml::source_position where;
};

// Copies a toml++ node (recursively: `depth` is the node's nesting level, the root's is 0).
std::unique_ptr<bk_toml_node> convert(const toml::node &node, const position_map &map, int depth)
{
    if (depth > BK_TOML_MAX_DEPTH)
        throw too_deep{node.source().begin};
    auto out = std::make_unique<bk_toml_node>();
    out->pos = make_pos(node.source(), map);
    switch (node.type()) {
    case toml::node_type::table: {
        out->type = BK_TOML_TABLE;
        for (auto &&[key, value] : *node.as_table()) {
            entry e;
            e.key = std::string(key.str());
            e.key_pos = make_pos(key.source(), map);
            if (!e.key_pos.line) // keys of inline tables may lack a region: use the value's
                e.key_pos = make_pos(value.source(), map);
            e.value = convert(value, map, depth + 1);
            out->entries.push_back(std::move(e));
        }
        // toml++ keeps keys sorted; report them in the order they were written
        std::stable_sort(out->entries.begin(), out->entries.end(), [](const entry &a, const entry &b) {
            return a.key_pos.line != b.key_pos.line ? a.key_pos.line < b.key_pos.line
                                                    : a.key_pos.column < b.key_pos.column;
        });
        break;
    }
    case toml::node_type::array:
        out->type = BK_TOML_ARRAY;
        for (const toml::node &element : *node.as_array())
            out->elements.push_back(convert(element, map, depth + 1));
        break;
    case toml::node_type::string:
        out->type = BK_TOML_STRING;
        out->text = std::string(node.as_string()->get());
        break;
    case toml::node_type::integer:
        out->type = BK_TOML_INT;
        out->integer = node.as_integer()->get();
        break;
    case toml::node_type::floating_point:
        out->type = BK_TOML_FLOAT;
        out->number = node.as_floating_point()->get();
        break;
    case toml::node_type::boolean:
        out->type = BK_TOML_BOOL;
        out->boolean = node.as_boolean()->get();
        break;
    case toml::node_type::date:
    case toml::node_type::time:
    case toml::node_type::date_time: {
        out->type = node.type() == toml::node_type::date ? BK_TOML_DATE
                    : node.type() == toml::node_type::time ? BK_TOML_TIME
                                                           : BK_TOML_DATETIME;
        std::ostringstream s;
        node.visit([&s](auto &&v) { s << v; });
        out->text = s.str();
        break;
    }
    default:
        out->type = BK_TOML_NONE;
        break;
    }
    return out;
}

// The position of the first NUL byte of text[0, len) (1-based line and byte column), or false.
bool find_nul(const char *text, size_t len, toml::source_position *where)
{
    const char *nul = static_cast<const char *>(memchr(text, '\0', len));
    if (!nul)
        return false;
    uint32_t line = 1;
    const char *line_start = text;
    for (const char *p = text; p < nul; p++)
        if (*p == '\n') {
            line++;
            line_start = p + 1;
        }
    where->line = line;
    where->column = (uint32_t)(nul - line_start) + 1;
    return true;
}

// Before toml++ sees the text: whether a single key has more than BK_TOML_MAX_DEPTH dotted segments
// or brackets nest more than BK_TOML_MAX_DEPTH deep, and where. toml++ builds, fixes up and frees its
// tree recursively, so a document 100,000 levels deep overflows the stack inside the library before
// convert() could count. This is a lexer's bound, not a parser: strings and comments are skipped, and
// dots are counted between the characters that end a key ('=', ',', brackets, braces, newline), so a
// float or a time (one dot) never counts. Together the bounds keep toml++'s tree a few hundred levels
// deep at most; convert() then applies the exact limit.
bool too_deep_text(std::string_view text, toml::source_position *where)
{
    uint32_t line = 1, column = 0;
    int dots = 0, brackets = 0;
    const size_t n = text.size();
    for (size_t i = 0; i < n; i++) {
        const char c = text[i];
        column++;
        if (c == '\n') {
            line++;
            column = 0;
            dots = 0;
            continue;
        }
        if (c == '#') { // a comment, to the end of the line
            while (i + 1 < n && text[i + 1] != '\n')
                i++;
            continue;
        }
        if (c == '"' || c == '\'') {
            const bool triple = i + 2 < n && text[i + 1] == c && text[i + 2] == c;
            size_t j = i + (triple ? 3 : 1);
            for (; j < n; j++) {
                if (c == '"' && text[j] == '\\') {
                    j++;
                } else if (text[j] == '\n') {
                    if (!triple)
                        break; // an unterminated string: toml++ reports it
                    line++;
                    column = 0;
                } else if (text[j] == c && (!triple || (j + 2 < n && text[j + 1] == c && text[j + 2] == c))) {
                    j += triple ? 2 : 0;
                    break;
                }
            }
            column += (uint32_t)(j - i);
            i = j < n && text[j] != '\n' ? j : j - 1;
            continue;
        }
        bool deeper = false;
        if (c == '.') {
            deeper = ++dots > BK_TOML_MAX_DEPTH;
        } else if (c == '=' || c == ',') {
            dots = 0;
        } else if (c == '[' || c == '{') {
            dots = 0;
            deeper = ++brackets > BK_TOML_MAX_DEPTH;
        } else if (c == ']' || c == '}') {
            dots = 0;
            brackets -= brackets > 0;
        }
        if (deeper) {
            where->line = line;
            where->column = column;
            return true;
        }
    }
    return false;
}

std::string too_deep_description()
{
    return "tables, arrays and dotted keys are nested more than " + std::to_string(BK_TOML_MAX_DEPTH) +
           " levels deep here (the limit, BK_TOML_MAX_DEPTH in core/config/toml.h)";
}

const char nul_description[] = "a NUL byte (\\0) is not allowed in a TOML document (is this a binary file?)";

// Parse `text`; on success *root holds the document's table converted with `map`. On a TOML error,
// fills description/line/column and returns false.
bool parse_text(std::string_view text, const std::string &source, const position_map &map,
                std::unique_ptr<bk_toml_node> *root, std::string *description, toml::source_position *where)
{
    if (find_nul(text.data(), text.size(), where)) { // toml++ would stop or complain less clearly
        *description = nul_description;
        return false;
    }
    if (too_deep_text(text, where)) {
        *description = too_deep_description();
        return false;
    }
    try {
#if TOML_EXCEPTIONS
        try {
            toml::table table = toml::parse(text, source);
            *root = convert(table, map, 0);
            return true;
        } catch (const toml::parse_error &e) {
            *description = std::string(e.description());
            *where = e.source().begin;
            return false;
        }
#else
        toml::parse_result result = toml::parse(text, source);
        if (!result) {
            *description = std::string(result.error().description());
            *where = result.error().source().begin;
            return false;
        }
        *root = convert(result.table(), map, 0);
        return true;
#endif
    } catch (const too_deep &e) {
        *description = too_deep_description();
        *where = e.where;
        return false;
    }
}

int parse_into(std::string_view text, const char *source_name, bk_toml **out, bk_error *err)
{
    *out = nullptr;
    auto doc = std::make_unique<bk_toml>();
    position_map map;
    map.source = doc->intern(source_name);
    std::string description;
    toml::source_position where{};
    if (!parse_text(text, source_name, map, &doc->root, &description, &where))
        return bk_fail(err, BK_ERR_PARSE, "%s:%u:%u: invalid TOML: %s", source_name, (unsigned)where.line,
                       (unsigned)where.column, description.c_str());
    if (!doc->root->pos.line) { // the root table has no position of its own: the file's start
        doc->root->pos.line = 1;
        doc->root->pos.column = 1;
    }
    *out = doc.release();
    return BK_OK;
}

const entry *find_entry(const bk_toml_node *table, const char *key)
{
    if (!table || table->type != BK_TOML_TABLE || !key)
        return nullptr;
    for (const entry &e : table->entries)
        if (e.key == key)
            return &e;
    return nullptr;
}

bool is_index(const std::string &segment)
{
    return !segment.empty() && segment.size() < 10 &&
           std::all_of(segment.begin(), segment.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string trim(const std::string &s)
{
    size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

int override_impl(bk_toml *doc, const char *assignment, bk_error *err)
{
    const std::string text(assignment);
    auto usage = [&](const std::string &reason) {
        return bk_fail(err, BK_ERR_USAGE, "--set '%s': %s", assignment, reason.c_str());
    };
    size_t eq = text.find('=');
    if (eq == std::string::npos)
        return usage("expected KEY=VALUE, e.g. model.heads=8");
    const std::string path = trim(text.substr(0, eq));
    const size_t value_start = text.find_first_not_of(" \t", eq + 1);
    const std::string value_text = value_start == std::string::npos ? std::string() : trim(text.substr(value_start));
    if (path.empty())
        return usage("the key before '=' is empty");
    if (std::count(path.begin(), path.end(), '.') >= BK_TOML_MAX_DEPTH)
        return usage("the key has more than " + std::to_string(BK_TOML_MAX_DEPTH) +
                     " segments (the nesting limit, BK_TOML_MAX_DEPTH in core/config/toml.h)");
    if (value_text.empty())
        return usage("the value after '=' is empty");

    std::vector<std::string> segments;
    for (size_t b = 0;;) {
        size_t dot = path.find('.', b);
        std::string seg = trim(path.substr(b, dot == std::string::npos ? std::string::npos : dot - b));
        if (seg.empty())
            return usage("empty key segment in '" + path + "'");
        segments.push_back(seg);
        if (dot == std::string::npos)
            break;
        b = dot + 1;
    }

    // The value: a TOML value if it reads as one, else the text as a bare string.
    position_map map;
    map.source = doc->intern("--set " + text);
    const std::string wrapped = "v = " + value_text;
    map.column_offset = (int64_t)value_start - 4;
    std::unique_ptr<bk_toml_node> parsed;
    std::string description;
    toml::source_position where{};
    std::unique_ptr<bk_toml_node> value;
    if (value_text.find('\n') == std::string::npos &&
        parse_text(wrapped, "--set", map, &parsed, &description, &where) && parsed->entries.size() == 1) {
        value = std::move(parsed->entries[0].value);
    } else {
        value = std::make_unique<bk_toml_node>();
        value->type = BK_TOML_STRING;
        value->text = value_text;
        value->pos = {map.source, 1, (uint32_t)value_start + 1};
    }
    const bk_toml_pos key_pos = {map.source, 1, (uint32_t)(text.find_first_not_of(" \t") + 1)};

    // Walk to the parent of the last segment, creating tables on the way.
    bk_toml_node *node = doc->root.get();
    std::string walked;
    for (size_t i = 0; i < segments.size(); i++) {
        const std::string &seg = segments[i];
        const bool last = i + 1 == segments.size();
        const std::string here = walked.empty() ? std::string("the document") : "'" + walked + "'";
        if (node->type == BK_TOML_ARRAY) {
            if (!is_index(seg))
                return usage(here + " is an array: expected an element index, got '" + seg + "'");
            size_t index = std::stoul(seg);
            if (index >= node->elements.size())
                return usage("index " + seg + " is out of range: " + here + " has " +
                             std::to_string(node->elements.size()) + " element" +
                             (node->elements.size() == 1 ? "" : "s"));
            if (last) {
                node->elements[index] = std::move(value);
                return BK_OK;
            }
            node = node->elements[index].get();
        } else if (node->type == BK_TOML_TABLE) {
            entry *e = nullptr;
            for (entry &candidate : node->entries)
                if (candidate.key == seg)
                    e = &candidate;
            if (last) {
                if (e) {
                    e->key_pos = key_pos;
                    e->value = std::move(value);
                } else {
                    node->entries.push_back(entry{seg, key_pos, std::move(value)});
                }
                return BK_OK;
            }
            if (!e) {
                auto table = std::make_unique<bk_toml_node>();
                table->type = BK_TOML_TABLE;
                table->pos = key_pos;
                node->entries.push_back(entry{seg, key_pos, std::move(table)});
                e = &node->entries.back();
            }
            node = e->value.get();
        } else {
            return usage(here + " is " + (node->type == BK_TOML_INT ? "an " : "a ") + bk_toml_type_name(node->type) +
                         ", not a table or array, so it has no '" + seg + "'");
        }
        walked += (walked.empty() ? "" : ".") + seg;
    }
    return BK_OK; // not reached: the loop returns at the last segment
}

} // namespace

extern "C" {

int bk_toml_parse_string(const char *text, const char *source_name, bk_toml **out, bk_error *err)
{
    try {
        return parse_into(text ? text : "", source_name ? source_name : "<string>", out, err);
    } catch (const std::exception &e) {
        return bk_fail(err, BK_ERR_INTERNAL, "%s: reading TOML: %s", source_name ? source_name : "<string>", e.what());
    }
}

int bk_toml_parse_buffer(const char *text, size_t len, const char *source_name, bk_toml **out, bk_error *err)
{
    const char *name = source_name ? source_name : "<buffer>";
    try {
        return parse_into(std::string_view(text ? text : "", text ? len : 0), name, out, err);
    } catch (const std::exception &e) {
        return bk_fail(err, BK_ERR_INTERNAL, "%s: reading TOML: %s", name, e.what());
    }
}

int bk_toml_read_file(const char *path, char **text, size_t *len, bk_error *err)
{
    *text = nullptr;
    *len = 0;
    char *buf = nullptr;
    size_t used = 0;
    int rc = bk_file_read_all(path, "TOML file", BK_TEXT_FILE_MAX, &buf, &used, err);
    if (rc != BK_OK)
        return rc;
    toml::source_position where{};
    if (find_nul(buf, used, &where)) {
        free(buf);
        return bk_fail(err, BK_ERR_PARSE, "%s:%u:%u: invalid TOML: %s", path, (unsigned)where.line,
                       (unsigned)where.column, nul_description);
    }
    *text = buf;
    *len = used;
    return BK_OK;
}

int bk_toml_parse_file(const char *path, bk_toml **out, bk_error *err)
{
    *out = nullptr;
    char *text = nullptr;
    size_t len = 0;
    int rc = bk_toml_read_file(path, &text, &len, err);
    if (rc != BK_OK)
        return rc;
    rc = bk_toml_parse_buffer(text, len, path, out, err);
    free(text);
    return rc;
}

void bk_toml_free(bk_toml *doc)
{
    delete doc;
}

const bk_toml_node *bk_toml_root(const bk_toml *doc)
{
    return doc ? doc->root.get() : nullptr;
}

bk_toml_type bk_toml_type_of(const bk_toml_node *node)
{
    return node ? node->type : BK_TOML_NONE;
}

const char *bk_toml_type_name(bk_toml_type type)
{
    switch (type) {
    case BK_TOML_TABLE: return "table";
    case BK_TOML_ARRAY: return "array";
    case BK_TOML_STRING: return "string";
    case BK_TOML_INT: return "integer";
    case BK_TOML_FLOAT: return "float";
    case BK_TOML_BOOL: return "boolean";
    case BK_TOML_DATE: return "date";
    case BK_TOML_TIME: return "time";
    case BK_TOML_DATETIME: return "date-time";
    case BK_TOML_NONE: break;
    }
    return "nothing";
}

bk_toml_pos bk_toml_position(const bk_toml_node *node)
{
    if (!node)
        return bk_toml_pos{"", 0, 0};
    return node->pos;
}

size_t bk_toml_count(const bk_toml_node *node)
{
    if (!node)
        return 0;
    if (node->type == BK_TOML_TABLE)
        return node->entries.size();
    if (node->type == BK_TOML_ARRAY)
        return node->elements.size();
    return 0;
}

int bk_toml_entry_at(const bk_toml_node *table, size_t i, bk_toml_entry *out)
{
    if (!table || table->type != BK_TOML_TABLE || i >= table->entries.size())
        return -1;
    const entry &e = table->entries[i];
    out->key = e.key.c_str();
    out->key_pos = e.key_pos;
    out->value = e.value.get();
    return 0;
}

const bk_toml_node *bk_toml_get(const bk_toml_node *table, const char *key)
{
    const entry *e = find_entry(table, key);
    return e ? e->value.get() : nullptr;
}

bk_toml_pos bk_toml_key_position(const bk_toml_node *table, const char *key)
{
    const entry *e = find_entry(table, key);
    return e ? e->key_pos : bk_toml_position(table);
}

const bk_toml_node *bk_toml_at(const bk_toml_node *array, size_t i)
{
    if (!array || array->type != BK_TOML_ARRAY || i >= array->elements.size())
        return nullptr;
    return array->elements[i].get();
}

int64_t bk_toml_int(const bk_toml_node *node)
{
    return node && node->type == BK_TOML_INT ? node->integer : 0;
}

double bk_toml_float(const bk_toml_node *node)
{
    if (!node)
        return 0.0;
    if (node->type == BK_TOML_FLOAT)
        return node->number;
    if (node->type == BK_TOML_INT)
        return (double)node->integer;
    return 0.0;
}

int bk_toml_bool(const bk_toml_node *node)
{
    return node && node->type == BK_TOML_BOOL && node->boolean;
}

const char *bk_toml_string(const bk_toml_node *node)
{
    if (!node)
        return "";
    if (node->type == BK_TOML_STRING || node->type == BK_TOML_DATE || node->type == BK_TOML_TIME ||
        node->type == BK_TOML_DATETIME)
        return node->text.c_str();
    return "";
}

int bk_toml_override(bk_toml *doc, const char *assignment, bk_error *err)
{
    if (!doc || !assignment)
        return bk_fail(err, BK_ERR_INVALID, "bk_toml_override: no document or no assignment");
    try {
        return override_impl(doc, assignment, err);
    } catch (const std::exception &e) {
        return bk_fail(err, BK_ERR_INTERNAL, "--set '%s': %s", assignment, e.what());
    }
}

} // extern "C"
