/* Byte-level BPE tokenizers as HF tokenizers encodes them (data/bpe.h). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/bpe.h"

#include "util/file.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ------------------------------------------------------------------ the tokenizer */

enum { STEP_SPLIT, STEP_DIGITS };
enum { BH_ISOLATED, BH_REMOVED, BH_PREVIOUS, BH_NEXT, BH_CONTIGUOUS };
static const char *const behavior_names[] = {"Isolated", "Removed", "MergedWithPrevious", "MergedWithNext",
                                             "Contiguous"};

#define MAX_STEPS 16

typedef struct step {
    int kind;
    char *pattern;  /* STEP_SPLIT: the regex or the literal string */
    int is_regex;
    int behavior;
    int invert;
    int individual; /* STEP_DIGITS */
    pcre2_code *re;
} step;

/* The added tokens of one matching pass, bucketed by first byte. */
typedef struct added_set {
    int n;
    int32_t *ids;      /* by first byte: ids[start[b] .. start[b + 1]) */
    int start[257];
} added_set;

struct bk_bpe {
    int n_tokens; /* every id */
    int n_model;  /* ids [0, n_model) are the model's vocabulary */
    char **tok;
    uint32_t *tok_len;
    uint8_t *flags; /* F_ADDED, F_SPECIAL, F_NORMALIZED */
    /* vocabulary: string -> id over [0, n_model) */
    int32_t *vslot;
    size_t vmask;
    /* merges in file order, and pair -> (rank, merged id) */
    int32_t *merges; /* 2 per merge */
    size_t n_merges;
    uint64_t *pkey;
    uint32_t *prank;
    int32_t *pnew;
    size_t pmask;
    int32_t byte_id[256]; /* the id of each byte's alphabet character, -1 when not in the vocabulary */
    int unk_id;
    int fuse_unk, ignore_merges;
    int32_t *added; /* in file order */
    int n_added;
    added_set sets[2]; /* [0]: normalized = false, [1]: normalized = true */
    step steps[MAX_STEPS];
    int n_steps;
    int bl_prefix, bl_trim, bl_regex;
    pcre2_code *bl_re;
    int bos, eos;
    char describe[512];
};

enum { F_ADDED = 1, F_SPECIAL = 2, F_NORMALIZED = 4 };

static const char GPT2_REGEX[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char LLAMA3_REGEX[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                                   "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* llama.cpp's pre-tokenizer "default": its four regexes, applied in turn */
static const char *const DEFAULT_REGEXES[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|]+",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    "\\p{N}+",
    "[0-9][0-9][0-9]",
};

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the others to U+0100 on. */
static uint32_t byte_cp[256];
static int16_t cp_byte[324];
static uint8_t byte_utf8[256][2];
static uint8_t byte_utf8_len[256];

static void alphabet_init(void)
{
    static int done;
    if (done)
        return;
    int n = 0;
    for (int i = 0; i < 324; i++)
        cp_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        byte_cp[b] = printable ? (uint32_t)b : (uint32_t)(256 + n++);
        cp_byte[byte_cp[b]] = (int16_t)b;
        uint32_t c = byte_cp[b];
        if (c < 0x80) {
            byte_utf8[b][0] = (uint8_t)c;
            byte_utf8_len[b] = 1;
        } else {
            byte_utf8[b][0] = (uint8_t)(0xC0 | (c >> 6));
            byte_utf8[b][1] = (uint8_t)(0x80 | (c & 0x3F));
            byte_utf8_len[b] = 2;
        }
    }
    done = 1;
}

/* Length of the valid UTF-8 sequence at s[0..n), 0 when invalid (overlong, surrogate, > U+10FFFF). */
static size_t utf8_seq(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t k;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF)
        k = 2, v = c & 0x1F, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF)
        k = 3, v = c & 0x0F, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4)
        k = 4, v = c & 0x07, min = 0x10000;
    else
        return 0;
    if (n < k)
        return 0;
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    *cp = v;
    return k;
}

/* Offset of the first invalid byte, or n when s[0..n) is valid UTF-8. */
static size_t utf8_invalid_at(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        size_t k = utf8_seq(u + i, n - i, &cp);
        if (!k)
            return i;
        i += k;
    }
    return n;
}

static uint64_t hash_bytes(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static uint64_t hash_pair(uint64_t k)
{
    k *= 0x9E3779B97F4A7C15ull;
    return k ^ (k >> 31);
}

/* The id of s[0..n) in the model's vocabulary, or -1. */
static int vocab_find(const bk_bpe *t, const char *s, size_t n)
{
    size_t i = hash_bytes(s, n) & t->vmask;
    for (;;) {
        int32_t id = t->vslot[i];
        if (id < 0)
            return -1;
        if (t->tok_len[id] == n && memcmp(t->tok[id], s, n) == 0)
            return id;
        i = (i + 1) & t->vmask;
    }
}

static int pair_find(const bk_bpe *t, int32_t a, int32_t b, uint32_t *rank, int32_t *new_id)
{
    if (!t->pmask)
        return 0;
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t i = hash_pair(key) & t->pmask;
    for (;;) {
        if (t->pkey[i] == UINT64_MAX)
            return 0;
        if (t->pkey[i] == key) {
            *rank = t->prank[i];
            *new_id = t->pnew[i];
            return 1;
        }
        i = (i + 1) & t->pmask;
    }
}

void bk_bpe_free(bk_bpe *t)
{
    if (!t)
        return;
    if (t->tok)
        for (int i = 0; i < t->n_tokens; i++)
            free(t->tok[i]);
    free(t->tok);
    free(t->tok_len);
    free(t->flags);
    free(t->vslot);
    free(t->merges);
    free(t->pkey);
    free(t->prank);
    free(t->pnew);
    free(t->added);
    for (int s = 0; s < 2; s++)
        free(t->sets[s].ids);
    for (int i = 0; i < t->n_steps; i++) {
        free(t->steps[i].pattern);
        pcre2_code_free(t->steps[i].re);
    }
    pcre2_code_free(t->bl_re);
    free(t);
}

static bk_bpe *bpe_new(void)
{
    alphabet_init();
    bk_bpe *t = calloc(1, sizeof *t);
    if (t) {
        t->unk_id = t->bos = t->eos = -1;
        t->bl_regex = 1;
    }
    return t;
}

/* Room for n tokens; strings set with set_token. */
static int tokens_alloc(bk_bpe *t, int n, bk_error *err)
{
    t->tok = calloc((size_t)n, sizeof *t->tok);
    t->tok_len = calloc((size_t)n, sizeof *t->tok_len);
    t->flags = calloc((size_t)n, 1);
    if (!t->tok || !t->tok_len || !t->flags)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for a vocabulary of %d tokens", n);
    t->n_tokens = n;
    return BK_OK;
}

static int set_token(bk_bpe *t, int id, const char *s, size_t n, const char *name, const char *where,
                     bk_error *err)
{
    if (n == 0)
        return bk_fail(err, BK_ERR_PARSE, "%s: %s: token %d is empty", name, where, id);
    size_t bad = utf8_invalid_at(s, n);
    if (bad < n)
        return bk_fail(err, BK_ERR_PARSE, "%s: %s: token %d is not valid UTF-8 (byte %zu)", name, where, id, bad);
    if (memchr(s, '\0', n))
        return bk_fail(err, BK_ERR_UNSUPPORTED, "%s: %s: token %d holds a NUL character", name, where, id);
    t->tok[id] = malloc(n + 1);
    if (!t->tok[id])
        return bk_fail(err, BK_ERR_NOMEM, "out of memory");
    memcpy(t->tok[id], s, n);
    t->tok[id][n] = '\0';
    t->tok_len[id] = (uint32_t)n;
    return BK_OK;
}

/* Hashes the model's vocabulary [0, n_model); a repeated string is refused. */
static int vocab_build(bk_bpe *t, const char *name, const char *where, bk_error *err)
{
    size_t cap = 16;
    while (cap < (size_t)t->n_model * 2)
        cap <<= 1;
    t->vslot = malloc(cap * sizeof *t->vslot);
    if (!t->vslot)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory");
    memset(t->vslot, 0xff, cap * sizeof *t->vslot);
    t->vmask = cap - 1;
    for (int id = 0; id < t->n_model; id++) {
        if (!t->tok[id])
            return bk_fail(err, BK_ERR_PARSE, "%s: %s: no token has id %d (expected ids 0 to %d)", name, where, id,
                           t->n_model - 1);
        size_t i = hash_bytes(t->tok[id], t->tok_len[id]) & t->vmask;
        for (;;) {
            int32_t o = t->vslot[i];
            if (o < 0) {
                t->vslot[i] = id;
                break;
            }
            if (t->tok_len[o] == t->tok_len[id] && memcmp(t->tok[o], t->tok[id], t->tok_len[id]) == 0)
                return bk_fail(err, BK_ERR_PARSE, "%s: %s: token '%s' appears twice (ids %d and %d)", name, where,
                               t->tok[id], o, id);
            i = (i + 1) & t->vmask;
        }
    }
    for (int b = 0; b < 256; b++)
        t->byte_id[b] = vocab_find(t, (const char *)byte_utf8[b], byte_utf8_len[b]);
    return BK_OK;
}

/* Adds merge number `rank` (a, b); a pair listed again takes the later rank, as HF's map does. */
static int merge_add(bk_bpe *t, size_t rank, const char *a, size_t na, const char *b, size_t nb, const char *name,
                     const char *where, bk_error *err)
{
    int ia = vocab_find(t, a, na), ib = vocab_find(t, b, nb);
    if (ia < 0 || ib < 0)
        return bk_fail(err, BK_ERR_PARSE, "%s: %s[%zu]: token '%.*s' is not in the vocabulary", name, where, rank,
                       (int)(ia < 0 ? na : nb), ia < 0 ? a : b);
    char stack[512], *cat = na + nb <= sizeof stack ? stack : malloc(na + nb);
    if (!cat)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory");
    memcpy(cat, a, na);
    memcpy(cat + na, b, nb);
    int merged = vocab_find(t, cat, na + nb);
    if (merged < 0) {
        bk_fail(err, BK_ERR_PARSE, "%s: %s[%zu]: the merge of '%.*s' and '%.*s', '%.*s', is not in the vocabulary",
                name, where, rank, (int)na, a, (int)nb, b, (int)(na + nb), cat);
        if (cat != stack)
            free(cat);
        return err ? err->code : BK_ERR_PARSE;
    }
    if (cat != stack)
        free(cat);
    t->merges[2 * rank] = ia;
    t->merges[2 * rank + 1] = ib;
    uint64_t key = ((uint64_t)(uint32_t)ia << 32) | (uint32_t)ib;
    size_t i = hash_pair(key) & t->pmask;
    while (t->pkey[i] != UINT64_MAX && t->pkey[i] != key)
        i = (i + 1) & t->pmask;
    t->pkey[i] = key;
    t->prank[i] = (uint32_t)rank;
    t->pnew[i] = merged;
    return BK_OK;
}

static int merges_alloc(bk_bpe *t, size_t n, bk_error *err)
{
    size_t cap = 16;
    while (cap < n * 2)
        cap <<= 1;
    t->n_merges = n;
    t->merges = malloc((n ? n : 1) * 2 * sizeof *t->merges);
    t->pkey = malloc(cap * sizeof *t->pkey);
    t->prank = malloc(cap * sizeof *t->prank);
    t->pnew = malloc(cap * sizeof *t->pnew);
    if (!t->merges || !t->pkey || !t->prank || !t->pnew)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for %zu merges", n);
    memset(t->pkey, 0xff, cap * sizeof *t->pkey);
    t->pmask = cap - 1;
    return BK_OK;
}

/* HF's regexes are Oniguruma's (Ruby syntax), whose classes differ from PCRE2's in UCP mode: \s is exactly
 * Unicode White_Space (PCRE2 adds U+180E), and ^ and $ match at every line. The pattern is rewritten with \s and
 * \S spelled out and compiled with PCRE2_MULTILINE. Oniguruma's \w is no union of general categories (it
 * takes U+00B3 but not U+325C, both No), so \w, \W, \b and \B are refused. */
#define WS_RANGES "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define NWS_RANGES                                                                                                    \
    "\\x{0}-\\x{8}\\x{E}-\\x{1F}\\x{21}-\\x{84}\\x{86}-\\x{9F}\\x{A1}-\\x{167F}\\x{1681}-\\x{1FFF}\\x{200B}-\\x{2027}"      \
    "\\x{202A}-\\x{202E}\\x{2030}-\\x{205E}\\x{2060}-\\x{2FFF}\\x{3001}-\\x{10FFFF}"

static int onig_classes(const char *pattern, char **out, const char *name, const char *where, bk_error *err)
{
    size_t n = strlen(pattern), cap = 2 * n + 1, k = 0;
    for (size_t i = 0; i + 1 < n; i++)
        if (pattern[i] == '\\')
            cap += sizeof NWS_RANGES + 4;
    char *r = malloc(cap);
    if (!r)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory");
    int in_class = 0;
    for (size_t i = 0; i < n; i++) {
        char c = pattern[i];
        const char *add = NULL;
        if (c == '\\' && i + 1 < n) {
            char e = pattern[i + 1];
            if (e == 's')
                add = in_class ? WS_RANGES : "[" WS_RANGES "]";
            else if (e == 'S')
                add = in_class ? NWS_RANGES : "[" NWS_RANGES "]";
            else if (e == 'w' || e == 'W' || e == 'b' || e == 'B') {
                free(r);
                return bk_fail(err, BK_ERR_UNSUPPORTED,
                               "%s: %s: the regex '%s' uses \\%c, whose Unicode meaning differs between HF's "
                               "Oniguruma and PCRE2 (not supported)",
                               name, where, pattern, e);
            }
            if (add) {
                memcpy(r + k, add, strlen(add));
                k += strlen(add);
            } else {
                r[k++] = c;
                r[k++] = e;
            }
            i++;
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = 1;
            r[k++] = c;
            /* a ']' right after '[' or '[^' is a literal */
            if (i + 1 < n && pattern[i + 1] == '^')
                r[k++] = pattern[++i];
            if (i + 1 < n && pattern[i + 1] == ']')
                r[k++] = pattern[++i];
            continue;
        }
        if (c == '[' && in_class && i + 1 < n && pattern[i + 1] == ':') { /* [:alpha:] */
            const char *close = strstr(pattern + i + 2, ":]");
            if (close) {
                size_t len = (size_t)(close + 2 - (pattern + i));
                memcpy(r + k, pattern + i, len);
                k += len;
                i += len - 1;
                continue;
            }
        }
        if (c == '[' && in_class) {
            free(r);
            return bk_fail(err, BK_ERR_UNSUPPORTED, "%s: %s: the regex '%s' nests character classes (not supported)",
                           name, where, pattern);
        }
        if (c == ']' && in_class)
            in_class = 0;
        r[k++] = c;
    }
    r[k] = '\0';
    *out = r;
    return BK_OK;
}

static int compile_regex(const char *pattern, int literal, pcre2_code **out, const char *name, const char *where,
                         bk_error *err)
{
    int code;
    PCRE2_SIZE off;
    uint32_t opts = literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE;
    char *rewritten = NULL;
    if (!literal && onig_classes(pattern, &rewritten, name, where, err))
        return err->code;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)(literal ? pattern : rewritten), PCRE2_ZERO_TERMINATED, opts, &code,
                                   &off, NULL);
    free(rewritten);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return bk_fail(err, BK_ERR_PARSE, "%s: %s: the regex '%s' does not compile (%s)", name, where, pattern,
                       (const char *)msg);
    }
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* without JIT (unsupported CPU) the interpreter runs */
    *out = re;
    return BK_OK;
}

static int add_split(bk_bpe *t, const char *pattern, int is_regex, int behavior, int invert, const char *name,
                     const char *where, bk_error *err)
{
    if (t->n_steps == MAX_STEPS)
        return bk_fail(err, BK_ERR_UNSUPPORTED, "%s: %s: more than %d pre-tokenizer steps", name, where, MAX_STEPS);
    step *s = &t->steps[t->n_steps];
    memset(s, 0, sizeof *s);
    s->kind = STEP_SPLIT;
    s->is_regex = is_regex;
    s->behavior = behavior;
    s->invert = invert;
    size_t plen = strlen(pattern);
    s->pattern = malloc(plen + 1);
    if (s->pattern)
        memcpy(s->pattern, pattern, plen + 1);
    if (!s->pattern)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory");
    t->n_steps++;
    return compile_regex(pattern, !is_regex, &s->re, name, where, err);
}

static int add_digits(bk_bpe *t, int individual, const char *name, const char *where, bk_error *err)
{
    int rc = add_split(t, "\\p{N}", 1, individual ? BH_ISOLATED : BH_CONTIGUOUS, 0, name, where, err);
    if (rc == BK_OK) {
        t->steps[t->n_steps - 1].kind = STEP_DIGITS;
        t->steps[t->n_steps - 1].individual = individual;
    }
    return rc;
}

/* The added tokens' buckets by first byte, one set per normalized flag. */
static int added_index(bk_bpe *t, bk_error *err)
{
    for (int s = 0; s < 2; s++) {
        added_set *set = &t->sets[s];
        int count[256] = {0};
        set->n = 0;
        for (int i = 0; i < t->n_added; i++) {
            int id = t->added[i];
            if (((t->flags[id] & F_NORMALIZED) != 0) == s) {
                count[(unsigned char)t->tok[id][0]]++;
                set->n++;
            }
        }
        set->ids = malloc((size_t)(set->n ? set->n : 1) * sizeof *set->ids);
        if (!set->ids)
            return bk_fail(err, BK_ERR_NOMEM, "out of memory");
        set->start[0] = 0;
        for (int b = 0; b < 256; b++)
            set->start[b + 1] = set->start[b] + count[b];
        int fill[256];
        memcpy(fill, set->start, sizeof fill);
        for (int i = 0; i < t->n_added; i++) {
            int id = t->added[i];
            if (((t->flags[id] & F_NORMALIZED) != 0) == s)
                set->ids[fill[(unsigned char)t->tok[id][0]]++] = id;
        }
    }
    return BK_OK;
}

static void describe(bk_bpe *t)
{
    char *p = t->describe;
    size_t left = sizeof t->describe;
    int n = snprintf(p, left, "%s", t->n_steps ? "Sequence[" : "");
    for (int i = 0; i < t->n_steps && n >= 0 && (size_t)n < left; i++) {
        const step *s = &t->steps[i];
        if (s->kind == STEP_DIGITS)
            n += snprintf(p + n, left - (size_t)n, "Digits(%s), ", s->individual ? "individual" : "contiguous");
        else
            n += snprintf(p + n, left - (size_t)n, "Split(%s, %s%s), ", s->is_regex ? "regex" : "string",
                          behavior_names[s->behavior], s->invert ? ", inverted" : "");
    }
    if (n >= 0 && (size_t)n < left)
        snprintf(p + n, left - (size_t)n, "ByteLevel(%s%s)%s", t->bl_prefix ? "prefix space, " : "",
                 t->bl_regex ? "regex" : "no regex", t->n_steps ? "]" : "");
}

/* Compiles GPT-2's regex when ByteLevel uses it, indexes the added tokens, sets the description. */
static int finish(bk_bpe *t, const char *name, bk_error *err)
{
    if (t->bl_regex && compile_regex(GPT2_REGEX, 0, &t->bl_re, name, "ByteLevel", err))
        return err->code;
    if (added_index(t, err))
        return err->code;
    describe(t);
    return BK_OK;
}

/* ------------------------------------------------------------------ tokenizer.json */

typedef struct json_ctx {
    const char *name;
    bk_error *err;
} json_ctx;

static const char *json_kind(const cJSON *j)
{
    if (!j)
        return "nothing";
    if (cJSON_IsNull(j))
        return "null";
    if (cJSON_IsBool(j))
        return "a boolean";
    if (cJSON_IsNumber(j))
        return "a number";
    if (cJSON_IsString(j))
        return "a string";
    if (cJSON_IsArray(j))
        return "an array";
    return "an object";
}

static int expect_fail(json_ctx *c, const char *where, const char *expected, const cJSON *got)
{
    if (got && cJSON_IsString(got))
        return bk_fail(c->err, BK_ERR_PARSE, "%s: %s: expected %s, got the string \"%.200s\"", c->name, where, expected,
                       got->valuestring);
    return bk_fail(c->err, BK_ERR_PARSE, "%s: %s: expected %s, got %s", c->name, where, expected, json_kind(got));
}

/* A boolean member (default when missing or null). */
static int get_bool(json_ctx *c, const cJSON *obj, const char *key, const char *where, int def, int *out)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!j || cJSON_IsNull(j)) {
        *out = def;
        return BK_OK;
    }
    if (!cJSON_IsBool(j)) {
        char w[256];
        snprintf(w, sizeof w, "%s.%s", where, key);
        return expect_fail(c, w, "true or false", j);
    }
    *out = cJSON_IsTrue(j);
    return BK_OK;
}

/* A string member, or NULL when missing or null. */
static int get_string(json_ctx *c, const cJSON *obj, const char *key, const char *where, const char **out)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
    *out = NULL;
    if (!j || cJSON_IsNull(j))
        return BK_OK;
    if (!cJSON_IsString(j)) {
        char w[256];
        snprintf(w, sizeof w, "%s.%s", where, key);
        return expect_fail(c, w, "a string", j);
    }
    *out = j->valuestring;
    return BK_OK;
}

static int get_id(json_ctx *c, const cJSON *j, const char *where, int max, int *out)
{
    *out = 0;
    /* the range first: only a value in [0, max) may be converted to an integer (2e48 may not) */
    if (!cJSON_IsNumber(j) || !(j->valuedouble >= 0 && j->valuedouble < (double)max) ||
        j->valuedouble != (double)(int)j->valuedouble)
        return expect_fail(c, where, "a token id (an integer >= 0)", j);
    *out = (int)j->valuedouble;
    return BK_OK;
}

static int parse_pre(bk_bpe *t, json_ctx *c, const cJSON *j, const char *where, int *saw_bytelevel, int depth)
{
    if (!cJSON_IsObject(j))
        return expect_fail(c, where, "a pre-tokenizer object", j);
    if (depth > 8)
        return bk_fail(c->err, BK_ERR_UNSUPPORTED, "%s: %s: pre-tokenizer Sequences nested too deep", c->name, where);
    const char *type;
    if (get_string(c, j, "type", where, &type))
        return c->err->code;
    if (!type)
        return bk_fail(c->err, BK_ERR_PARSE, "%s: %s: a pre-tokenizer without \"type\"", c->name, where);
    if (*saw_bytelevel)
        return bk_fail(c->err, BK_ERR_UNSUPPORTED,
                       "%s: %s: a %s pre-tokenizer after ByteLevel (supported: ByteLevel last, after Split and Digits)",
                       c->name, where, type);
    char w[256];
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(j, "pretokenizers");
        if (!cJSON_IsArray(list)) {
            snprintf(w, sizeof w, "%s.pretokenizers", where);
            return expect_fail(c, w, "an array", list);
        }
        int i = 0;
        for (const cJSON *e = list->child; e; e = e->next, i++) {
            snprintf(w, sizeof w, "%s.pretokenizers[%d]", where, i);
            if (parse_pre(t, c, e, w, saw_bytelevel, depth + 1))
                return c->err->code;
        }
        return BK_OK;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        if (get_bool(c, j, "add_prefix_space", where, 1, &t->bl_prefix) ||
            get_bool(c, j, "trim_offsets", where, 1, &t->bl_trim) ||
            get_bool(c, j, "use_regex", where, 1, &t->bl_regex))
            return c->err->code;
        *saw_bytelevel = 1;
        return BK_OK;
    }
    if (strcmp(type, "Digits") == 0) {
        int individual;
        if (get_bool(c, j, "individual_digits", where, 0, &individual))
            return c->err->code;
        return add_digits(t, individual, c->name, where, c->err);
    }
    if (strcmp(type, "Split") == 0) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(j, "pattern");
        const cJSON *re = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
        const cJSON *lit = cJSON_GetObjectItemCaseSensitive(pat, "String");
        snprintf(w, sizeof w, "%s.pattern", where);
        if (!cJSON_IsObject(pat) || !(cJSON_IsString(re) || cJSON_IsString(lit)))
            return expect_fail(c, w, "{\"Regex\": \"...\"} or {\"String\": \"...\"}", pat);
        const char *behavior;
        int invert, b = -1;
        if (get_string(c, j, "behavior", where, &behavior) || get_bool(c, j, "invert", where, 0, &invert))
            return c->err->code;
        for (int k = 0; behavior && k < 5; k++)
            if (strcmp(behavior, behavior_names[k]) == 0)
                b = k;
        if (b < 0)
            return bk_fail(c->err, BK_ERR_UNSUPPORTED,
                           "%s: %s.behavior: '%s' is not a Split behavior (expected Isolated, Removed, "
                           "MergedWithPrevious, MergedWithNext or Contiguous)",
                           c->name, where, behavior ? behavior : "(missing)");
        const char *p = cJSON_IsString(re) ? re->valuestring : lit->valuestring;
        if (!*p)
            return bk_fail(c->err, BK_ERR_UNSUPPORTED, "%s: %s: an empty Split pattern", c->name, w);
        return add_split(t, p, cJSON_IsString(re), b, invert, c->name, w, c->err);
    }
    return bk_fail(c->err, BK_ERR_UNSUPPORTED,
                   "%s: %s: pre-tokenizer '%s' is not supported (supported: ByteLevel, Sequence, Split, Digits)",
                   c->name, where, type);
}

/* bos from a TemplateProcessing whose single template begins with a special token. */
static int template_bos(const bk_bpe *t, const cJSON *pp)
{
    if (!cJSON_IsObject(pp))
        return -1;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(pp, "type");
    if (cJSON_IsString(type) && strcmp(type->valuestring, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(pp, "processors");
        for (const cJSON *e = cJSON_IsArray(list) ? list->child : NULL; e; e = e->next) {
            int b = template_bos(t, e);
            if (b >= 0)
                return b;
        }
        return -1;
    }
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "TemplateProcessing") != 0)
        return -1;
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(pp, "single");
    const cJSON *first = cJSON_IsArray(single) ? single->child : NULL;
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(first, "SpecialToken");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(sp, "id");
    if (!cJSON_IsString(id))
        return -1;
    for (int i = 0; i < t->n_added; i++)
        if (strcmp(t->tok[t->added[i]], id->valuestring) == 0)
            return t->added[i];
    return -1;
}

static int parse_json(bk_bpe *t, json_ctx *c, const cJSON *root)
{
    bk_error *err = c->err;
    const char *name = c->name;
    if (!cJSON_IsObject(root))
        return expect_fail(c, "the top level", "an object", root);
    static const char *const nulls[] = {"normalizer", "truncation", "padding"};
    for (int k = 0; k < 3; k++) {
        const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, nulls[k]);
        if (j && !cJSON_IsNull(j)) {
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
            return bk_fail(err, BK_ERR_UNSUPPORTED, "%s: %s: only null is supported, got %s%s%s", name, nulls[k],
                           cJSON_IsString(type) ? "type '" : json_kind(j),
                           cJSON_IsString(type) ? type->valuestring : "", cJSON_IsString(type) ? "'" : "");
        }
    }
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model))
        return expect_fail(c, "model", "an object", model);
    const char *s;
    if (get_string(c, model, "type", "model", &s))
        return err->code;
    if (s && strcmp(s, "BPE") != 0)
        return bk_fail(err, BK_ERR_UNSUPPORTED, "%s: model.type: '%s' is not supported (only BPE)", name, s);
    int flag;
    if (get_bool(c, model, "byte_fallback", "model", 0, &flag))
        return err->code;
    if (flag)
        return bk_fail(err, BK_ERR_UNSUPPORTED, "%s: model.byte_fallback: true is not supported (byte-level BPE only)",
                       name);
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (dropout && !cJSON_IsNull(dropout) && !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0.0))
        return bk_fail(err, BK_ERR_UNSUPPORTED, "%s: model.dropout: only null is supported (encoding is deterministic)",
                       name);
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 2; k++) {
        if (get_string(c, model, affixes[k], "model", &s))
            return err->code;
        if (s && *s)
            return bk_fail(err, BK_ERR_UNSUPPORTED, "%s: model.%s: \"%s\" is not supported (only null or \"\")", name,
                           affixes[k], s);
    }
    if (get_bool(c, model, "fuse_unk", "model", 0, &t->fuse_unk) ||
        get_bool(c, model, "ignore_merges", "model", 0, &t->ignore_merges))
        return err->code;

    /* the vocabulary */
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    if (!cJSON_IsObject(vocab))
        return expect_fail(c, "model.vocab", "an object of token: id", vocab);
    int n_model = cJSON_GetArraySize(vocab);
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (added && !cJSON_IsNull(added) && !cJSON_IsArray(added))
        return expect_fail(c, "added_tokens", "an array", added);
    int n_added = cJSON_IsArray(added) ? cJSON_GetArraySize(added) : 0;
    if (n_model <= 0)
        return bk_fail(err, BK_ERR_PARSE, "%s: model.vocab: empty", name);
    if (n_model > (1 << 28) || n_added > (1 << 24))
        return bk_fail(err, BK_ERR_UNSUPPORTED, "%s: model.vocab: too many tokens", name);
    /* ids past the vocabulary: the added tokens not in it, at most n_added */
    if (tokens_alloc(t, n_model + n_added, err))
        return err->code;
    t->n_model = n_model;
    for (const cJSON *e = vocab->child; e; e = e->next) {
        char w[64];
        int id;
        snprintf(w, sizeof w, "model.vocab[\"%.30s\"]", e->string);
        if (get_id(c, e, w, n_model, &id))
            return bk_fail(err, BK_ERR_PARSE, "%s: %s: expected an id in [0, %d) (the ids are 0 to the vocabulary's size "
                           "- 1), got %s",
                           name, w, n_model, json_kind(e));
        if (t->tok[id])
            return bk_fail(err, BK_ERR_PARSE, "%s: model.vocab: id %d is given to both '%s' and '%s'", name, id,
                           t->tok[id], e->string);
        if (set_token(t, id, e->string, strlen(e->string), name, "model.vocab", err))
            return err->code;
    }
    if (vocab_build(t, name, "model.vocab", err))
        return err->code;

    /* the merges */
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!cJSON_IsArray(merges))
        return expect_fail(c, "model.merges", "an array", merges);
    if (merges_alloc(t, (size_t)cJSON_GetArraySize(merges), err))
        return err->code;
    size_t r = 0;
    for (const cJSON *e = merges->child; e; e = e->next, r++) {
        if (cJSON_IsString(e)) {
            const char *sp = strchr(e->valuestring, ' ');
            if (!sp || strchr(sp + 1, ' '))
                return bk_fail(err, BK_ERR_PARSE, "%s: model.merges[%zu]: expected \"a b\" (two tokens and one space), "
                               "got \"%.200s\"",
                               name, r, e->valuestring);
            if (merge_add(t, r, e->valuestring, (size_t)(sp - e->valuestring), sp + 1, strlen(sp + 1), name,
                          "model.merges", err))
                return err->code;
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(e->child) &&
                   cJSON_IsString(e->child->next)) {
            const char *a = e->child->valuestring, *b = e->child->next->valuestring;
            if (merge_add(t, r, a, strlen(a), b, strlen(b), name, "model.merges", err))
                return err->code;
        } else {
            char w[64];
            snprintf(w, sizeof w, "model.merges[%zu]", r);
            return expect_fail(c, w, "\"a b\" or [\"a\", \"b\"]", e);
        }
    }
    if (get_string(c, model, "unk_token", "model", &s))
        return err->code;
    if (s && (t->unk_id = vocab_find(t, s, strlen(s))) < 0)
        return bk_fail(err, BK_ERR_PARSE, "%s: model.unk_token: '%s' is not in the vocabulary", name, s);

    /* added tokens: a vocabulary entry keeps its id, another gets the next id after the vocabulary */
    t->added = malloc((size_t)(n_added ? n_added : 1) * sizeof *t->added);
    if (!t->added)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory");
    int next = n_model, i = 0;
    for (const cJSON *e = n_added ? added->child : NULL; e; e = e->next, i++) {
        char w[64];
        snprintf(w, sizeof w, "added_tokens[%d]", i);
        if (!cJSON_IsObject(e))
            return expect_fail(c, w, "an object", e);
        const char *content;
        int id, special, normalized, lstrip, rstrip, single_word;
        if (get_string(c, e, "content", w, &content))
            return err->code;
        if (!content || !*content)
            return bk_fail(err, BK_ERR_PARSE, "%s: %s.content: expected a non-empty string", name, w);
        char wid[80];
        snprintf(wid, sizeof wid, "%s.id", w);
        if (get_id(c, cJSON_GetObjectItemCaseSensitive(e, "id"), wid, 1 << 30, &id) ||
            get_bool(c, e, "special", w, 0, &special) || get_bool(c, e, "normalized", w, !special, &normalized) ||
            get_bool(c, e, "lstrip", w, 0, &lstrip) || get_bool(c, e, "rstrip", w, 0, &rstrip) ||
            get_bool(c, e, "single_word", w, 0, &single_word))
            return err->code;
        if (lstrip || rstrip || single_word)
            return bk_fail(err, BK_ERR_UNSUPPORTED, "%s: %s ('%s'): %s true is not supported", name, w, content,
                           lstrip ? "lstrip" : rstrip ? "rstrip" : "single_word");
        int in_vocab = vocab_find(t, content, strlen(content));
        int expect = in_vocab >= 0 ? in_vocab : next;
        if (id != expect)
            return bk_fail(err, BK_ERR_UNSUPPORTED,
                           "%s: %s ('%s'): id %d, but HF tokenizers gives it id %d (%s); ids other than HF's are not "
                           "supported",
                           name, w, content, id, expect,
                           in_vocab >= 0 ? "its id in model.vocab" : "the next id after the vocabulary");
        if (t->flags[id] & F_ADDED)
            return bk_fail(err, BK_ERR_PARSE, "%s: %s: '%s' is listed twice", name, w, content);
        if (in_vocab < 0) {
            if (set_token(t, id, content, strlen(content), name, w, err))
                return err->code;
            next++;
        }
        t->flags[id] = (uint8_t)(F_ADDED | (special ? F_SPECIAL : 0) | (normalized ? F_NORMALIZED : 0));
        t->added[t->n_added++] = id;
    }
    t->n_tokens = next;

    /* the pre-tokenizer and the decoder */
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    int saw = 0;
    if (!pre || cJSON_IsNull(pre))
        return bk_fail(err, BK_ERR_UNSUPPORTED, "%s: pre_tokenizer: null; expected ByteLevel (byte-level BPE)", name);
    if (parse_pre(t, c, pre, "pre_tokenizer", &saw, 0))
        return err->code;
    if (!saw)
        return bk_fail(err, BK_ERR_UNSUPPORTED,
                       "%s: pre_tokenizer: no ByteLevel step; only byte-level BPE is supported", name);
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    if (dec && !cJSON_IsNull(dec)) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(dec, "type");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "ByteLevel") != 0)
            return bk_fail(err, BK_ERR_UNSUPPORTED, "%s: decoder: %s%s%s is not supported (only ByteLevel or null)",
                           name, cJSON_IsString(type) ? "'" : "", cJSON_IsString(type) ? type->valuestring : json_kind(dec),
                           cJSON_IsString(type) ? "'" : "");
    }

    /* bos / eos */
    const cJSON *bk = cJSON_GetObjectItemCaseSensitive(model, "biaskit");
    if (cJSON_IsObject(bk)) {
        static const char *const keys[] = {"bos_id", "eos_id"};
        for (int k = 0; k < 2; k++) {
            const cJSON *j = cJSON_GetObjectItemCaseSensitive(bk, keys[k]);
            int v = -1;
            char w[64];
            snprintf(w, sizeof w, "model.biaskit.%s", keys[k]);
            if (j && !(cJSON_IsNumber(j) && j->valuedouble == -1.0) && get_id(c, j, w, t->n_tokens, &v))
                return bk_fail(err, BK_ERR_PARSE, "%s: %s: expected -1 or an id in [0, %d)", name, w, t->n_tokens);
            *(k ? &t->eos : &t->bos) = v;
        }
    } else {
        t->bos = template_bos(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor"));
        static const char *const eos_names[] = {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"};
        for (int k = 0; k < 4 && t->eos < 0; k++)
            for (int a = 0; a < t->n_added; a++)
                if ((t->flags[t->added[a]] & F_SPECIAL) && strcmp(t->tok[t->added[a]], eos_names[k]) == 0)
                    t->eos = t->added[a];
    }
    return finish(t, name, err);
}

int bk_bpe_from_hf_json(const char *text, size_t len, const char *name, bk_bpe **out, bk_error *err)
{
    *out = NULL;
    if (!name)
        name = "tokenizer.json";
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        size_t off = end && end >= text ? (size_t)(end - text) : 0, line = 1, col = 1;
        for (size_t i = 0; i < off && i < len; i++) {
            if (text[i] == '\n')
                line++, col = 1;
            else
                col++;
        }
        return bk_fail(err, BK_ERR_PARSE, "%s: not valid JSON (line %zu, column %zu)", name, line, col);
    }
    bk_bpe *t = bpe_new();
    if (!t) {
        cJSON_Delete(root);
        return bk_fail(err, BK_ERR_NOMEM, "out of memory");
    }
    json_ctx c = {name, err};
    int rc = parse_json(t, &c, root);
    cJSON_Delete(root);
    if (rc != BK_OK) {
        bk_bpe_free(t);
        return rc;
    }
    *out = t;
    return BK_OK;
}

/* ------------------------------------------------------------------ GGUF */

static int gguf_strings(const bk_gguf *g, const char *path, const char *key, const bk_gguf_kv **out, bk_error *err)
{
    const bk_gguf_kv *kv = bk_gguf_find(g, key);
    if (!kv)
        return bk_fail(err, BK_ERR_PARSE, "%s: no %s in the metadata (a GGUF file with a BPE tokenizer has it)", path,
                       key);
    if (kv->type != BK_GGUF_ARRAY || kv->elem != BK_GGUF_STRING || !kv->strings)
        return bk_fail(err, BK_ERR_PARSE, "%s: %s: expected an array of strings", path, key);
    *out = kv;
    return BK_OK;
}

static int gguf_id(const bk_gguf *g, const char *path, const char *key, int n, int *out, bk_error *err)
{
    *out = -1;
    if (!bk_gguf_find(g, key))
        return BK_OK;
    uint64_t v;
    if (bk_gguf_get_uint(g, key, &v, err))
        return err->code;
    if (v >= (uint64_t)n)
        return bk_fail(err, BK_ERR_PARSE, "%s: %s: %llu is not a token id (the vocabulary has %d)", path, key,
                       (unsigned long long)v, n);
    *out = (int)v;
    return BK_OK;
}

static int parse_gguf(bk_bpe *t, const bk_gguf *g, const char *path, bk_error *err)
{
    const char *model;
    if (bk_gguf_get_string(g, "tokenizer.ggml.model", &model, err))
        return err->code;
    if (strcmp(model, "gpt2") != 0)
        return bk_fail(err, BK_ERR_UNSUPPORTED,
                       "%s: tokenizer.ggml.model: '%s' is not supported (only \"gpt2\", byte-level BPE)", path, model);
    const bk_gguf_kv *tokens, *merges;
    if (gguf_strings(g, path, "tokenizer.ggml.tokens", &tokens, err) ||
        gguf_strings(g, path, "tokenizer.ggml.merges", &merges, err))
        return err->code;
    if (tokens->count == 0 || tokens->count > (1u << 28))
        return bk_fail(err, BK_ERR_PARSE, "%s: tokenizer.ggml.tokens: %llu tokens (expected 1 to 2^28)", path,
                       (unsigned long long)tokens->count);
    int n = (int)tokens->count;
    if (tokens_alloc(t, n, err))
        return err->code;
    t->n_model = n;
    for (int i = 0; i < n; i++)
        if (set_token(t, i, tokens->strings[i], strlen(tokens->strings[i]), path, "tokenizer.ggml.tokens", err))
            return err->code;
    if (vocab_build(t, path, "tokenizer.ggml.tokens", err))
        return err->code;
    if (merges_alloc(t, (size_t)merges->count, err))
        return err->code;
    for (size_t r = 0; r < merges->count; r++) {
        const char *m = merges->strings[r], *sp = strchr(m, ' ');
        if (!sp || strchr(sp + 1, ' '))
            return bk_fail(err, BK_ERR_PARSE, "%s: tokenizer.ggml.merges[%zu]: expected \"a b\", got \"%.200s\"", path,
                           r, m);
        if (merge_add(t, r, m, (size_t)(sp - m), sp + 1, strlen(sp + 1), path, "tokenizer.ggml.merges", err))
            return err->code;
    }
    t->added = malloc((size_t)n * sizeof *t->added);
    if (!t->added)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory");
    const bk_gguf_kv *types = bk_gguf_find(g, "tokenizer.ggml.token_type");
    if (types) {
        if (types->type != BK_GGUF_ARRAY || (types->elem != BK_GGUF_I32 && types->elem != BK_GGUF_U32) ||
            types->count != tokens->count || !types->items)
            return bk_fail(err, BK_ERR_PARSE,
                           "%s: tokenizer.ggml.token_type: expected an array of %d 32-bit integers (one per token)",
                           path, n);
        for (int i = 0; i < n; i++) {
            const uint8_t *p = types->items + 4 * (size_t)i;
            uint32_t ty = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
            if (ty == 3 || ty == 4) { /* CONTROL, USER_DEFINED */
                t->flags[i] = (uint8_t)(F_ADDED | (ty == 3 ? F_SPECIAL : 0));
                t->added[t->n_added++] = i;
            }
        }
    }
    if (gguf_id(g, path, "tokenizer.ggml.bos_token_id", n, &t->bos, err) ||
        gguf_id(g, path, "tokenizer.ggml.eos_token_id", n, &t->eos, err))
        return err->code;

    const char *pre = "default";
    if (bk_gguf_find(g, "tokenizer.ggml.pre") && bk_gguf_get_string(g, "tokenizer.ggml.pre", &pre, err))
        return err->code;
    t->bl_prefix = 0;
    t->bl_trim = 0;
    if (strcmp(pre, "gpt2") == 0) {
        t->bl_regex = 1;
    } else if (strcmp(pre, "smollm") == 0) {
        t->bl_regex = 1;
        if (add_digits(t, 1, path, "tokenizer.ggml.pre", err))
            return err->code;
    } else if (strcmp(pre, "llama3") == 0 || strcmp(pre, "llama-bpe") == 0) {
        t->bl_regex = 0;
        t->ignore_merges = 1;
        if (add_split(t, LLAMA3_REGEX, 1, BH_ISOLATED, 0, path, "tokenizer.ggml.pre", err))
            return err->code;
    } else if (strcmp(pre, "default") == 0) {
        t->bl_regex = 0;
        for (int k = 0; k < 4; k++)
            if (add_split(t, DEFAULT_REGEXES[k], 1, BH_ISOLATED, 0, path, "tokenizer.ggml.pre", err))
                return err->code;
    } else {
        return bk_fail(err, BK_ERR_UNSUPPORTED,
                       "%s: tokenizer.ggml.pre: '%s' is not supported (supported: gpt2, smollm, llama3, llama-bpe, "
                       "default)",
                       path, pre);
    }
    return finish(t, path, err);
}

int bk_bpe_from_gguf(const bk_gguf *g, const char *path, bk_bpe **out, bk_error *err)
{
    *out = NULL;
    bk_bpe *t = bpe_new();
    if (!t)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory");
    int rc = parse_gguf(t, g, path ? path : "GGUF file", err);
    if (rc != BK_OK) {
        bk_bpe_free(t);
        return rc;
    }
    *out = t;
    return BK_OK;
}

int bk_bpe_open(const char *path, bk_bpe **out, bk_error *err)
{
    *out = NULL;
    struct stat st;
    if (stat(path, &st) != 0)
        return bk_fail(err, BK_ERR_IO, "cannot read the tokenizer '%s': %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) {
        size_t n = strlen(path);
        char *json = malloc(n + 32);
        if (!json)
            return bk_fail(err, BK_ERR_NOMEM, "out of memory");
        snprintf(json, n + 32, "%s%stokenizer.json", path, n && path[n - 1] == '/' ? "" : "/");
        int rc = bk_bpe_open(json, out, err);
        free(json);
        return rc;
    }
    FILE *f;
    if (bk_file_open_regular(path, "tokenizer", 0, &f, NULL, err))
        return err->code;
    char magic[4] = {0};
    size_t got = fread(magic, 1, 4, f);
    fclose(f);
    if (got == 4 && memcmp(magic, "GGUF", 4) == 0) {
        bk_gguf *g;
        if (bk_gguf_open(path, &g, err))
            return err->code;
        int rc = bk_bpe_from_gguf(g, path, out, err);
        bk_gguf_close(g);
        return rc;
    }
    char *text;
    size_t len;
    if (bk_file_read_all(path, "tokenizer.json", BK_BPE_JSON_MAX, &text, &len, err))
        return err->code;
    int rc = bk_bpe_from_hf_json(text, len, path, out, err);
    free(text);
    return rc;
}

/* ------------------------------------------------------------------ accessors */

int bk_bpe_vocab_size(const bk_bpe *t) { return t->n_tokens; }
int bk_bpe_bos(const bk_bpe *t) { return t->bos; }
int bk_bpe_eos(const bk_bpe *t) { return t->eos; }
const char *bk_bpe_describe(const bk_bpe *t) { return t->describe; }

const char *bk_bpe_token(const bk_bpe *t, int id)
{
    return id >= 0 && id < t->n_tokens ? t->tok[id] : NULL;
}

int bk_bpe_is_special(const bk_bpe *t, int id)
{
    return id >= 0 && id < t->n_tokens && (t->flags[id] & F_SPECIAL) != 0;
}

/* ------------------------------------------------------------------ encode */

typedef struct cache_entry {
    uint32_t hash, key_off, ids_off;
    uint16_t key_len, ids_n; /* key_len 0: empty */
} cache_entry;

#define CACHE_KEY_MAX 64
#define CACHE_SLOTS_MAX (1u << 18)

typedef struct heap_item {
    uint32_t rank, pos;
    int32_t new_id;
} heap_item;

typedef struct enc {
    const bk_bpe *t;
    const char *text;
    bk_error *err;
    int32_t *ids;
    size_t n, cap;
    pcre2_match_data *md;
    pcre2_match_context *mc;
    pcre2_jit_stack *js;
    char *scratch; /* a piece with its prefix space */
    size_t scratch_cap;
    char *mapped; /* a word in the byte-level alphabet */
    size_t mapped_cap;
    /* a word's symbols */
    int32_t *sid, *prv, *nxt;
    uint32_t *slen;
    size_t sym_cap;
    heap_item *heap;
    size_t heap_n, heap_cap;
    /* words already encoded */
    cache_entry *cache;
    size_t cache_mask, cache_used;
    unsigned char *ckeys;
    size_t ckeys_n, ckeys_cap;
    int32_t *cids;
    size_t cids_n, cids_cap;
} enc;

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

static int push_id(enc *e, int32_t id)
{
    if (e->n == e->cap && grow((void **)&e->ids, &e->cap, e->n + 1, sizeof *e->ids))
        return bk_fail(e->err, BK_ERR_NOMEM, "out of memory for the token ids");
    e->ids[e->n++] = id;
    return BK_OK;
}

static void heap_push(enc *e, heap_item it)
{
    size_t i = e->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        heap_item *q = &e->heap[p];
        if (q->rank < it.rank || (q->rank == it.rank && q->pos <= it.pos))
            break;
        e->heap[i] = *q;
        i = p;
    }
    e->heap[i] = it;
}

static heap_item heap_pop(enc *e)
{
    heap_item top = e->heap[0], last = e->heap[--e->heap_n];
    size_t i = 0, n = e->heap_n;
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        const heap_item *best = &last;
        if (l < n && (e->heap[l].rank < best->rank || (e->heap[l].rank == best->rank && e->heap[l].pos < best->pos)))
            m = l, best = &e->heap[l];
        if (l + 1 < n &&
            (e->heap[l + 1].rank < best->rank || (e->heap[l + 1].rank == best->rank && e->heap[l + 1].pos < best->pos)))
            m = l + 1, best = &e->heap[l + 1];
        if (m == i)
            break;
        e->heap[i] = e->heap[m];
        i = m;
    }
    if (n)
        e->heap[i] = last;
    return top;
}

static void try_pair(enc *e, size_t pos, size_t right)
{
    uint32_t rank;
    int32_t nid;
    if (pair_find(e->t, e->sid[pos], e->sid[right], &rank, &nid))
        heap_push(e, (heap_item){rank, (uint32_t)pos, nid});
}

static int cache_find(enc *e, const char *w, size_t n, uint32_t h)
{
    if (!e->cache)
        return 0;
    for (size_t i = h & e->cache_mask;; i = (i + 1) & e->cache_mask) {
        cache_entry *c = &e->cache[i];
        if (!c->key_len)
            return 0;
        if (c->hash == h && c->key_len == n && memcmp(e->ckeys + c->key_off, w, n) == 0) {
            for (size_t k = 0; k < c->ids_n; k++)
                if (push_id(e, e->cids[c->ids_off + k]))
                    return -1;
            return 1;
        }
    }
}

static void cache_put(enc *e, const char *w, size_t n, uint32_t h, const int32_t *ids, size_t k)
{
    if (k > 0xFFFF || e->ckeys_n + n > (1u << 30) || e->cids_n + k > (1u << 30))
        return;
    if ((e->cache_used + 1) * 4 > (e->cache_mask + 1) * 3) {
        size_t slots = e->cache ? (e->cache_mask + 1) * 2 : 1024;
        if (slots > CACHE_SLOTS_MAX)
            return;
        cache_entry *nc = calloc(slots, sizeof *nc);
        if (!nc)
            return;
        for (size_t i = 0; e->cache && i <= e->cache_mask; i++) {
            if (!e->cache[i].key_len)
                continue;
            size_t j = e->cache[i].hash & (slots - 1);
            while (nc[j].key_len)
                j = (j + 1) & (slots - 1);
            nc[j] = e->cache[i];
        }
        free(e->cache);
        e->cache = nc;
        e->cache_mask = slots - 1;
    }
    if (grow((void **)&e->ckeys, &e->ckeys_cap, e->ckeys_n + n, 1) ||
        grow((void **)&e->cids, &e->cids_cap, e->cids_n + k, sizeof *e->cids))
        return;
    size_t i = h & e->cache_mask;
    while (e->cache[i].key_len)
        i = (i + 1) & e->cache_mask;
    e->cache[i] = (cache_entry){h, (uint32_t)e->ckeys_n, (uint32_t)e->cids_n, (uint16_t)n, (uint16_t)k};
    memcpy(e->ckeys + e->ckeys_n, w, n);
    memcpy(e->cids + e->cids_n, ids, k * sizeof *ids);
    e->ckeys_n += n;
    e->cids_n += k;
    e->cache_used++;
}

/* One pre-token's bytes w[0..n) through the model (HF's BPE::tokenize_with_cache and Word::merge_all). */
static int bpe_word(enc *e, const char *w, size_t n)
{
    const bk_bpe *t = e->t;
    const unsigned char *u = (const unsigned char *)w;
    if (t->ignore_merges) {
        if (grow((void **)&e->mapped, &e->mapped_cap, 2 * n, 1))
            return bk_fail(e->err, BK_ERR_NOMEM, "out of memory");
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            memcpy(e->mapped + m, byte_utf8[u[i]], byte_utf8_len[u[i]]);
            m += byte_utf8_len[u[i]];
        }
        int id = vocab_find(t, e->mapped, m);
        if (id >= 0)
            return push_id(e, id);
    }
    uint32_t h = 0;
    if (n <= CACHE_KEY_MAX) {
        h = (uint32_t)hash_bytes(w, n);
        int hit = cache_find(e, w, n, h);
        if (hit)
            return hit < 0 ? e->err->code : BK_OK;
    }
    if (n > e->sym_cap) {
        size_t cap = e->sym_cap ? e->sym_cap : 64;
        while (cap < n)
            cap *= 2;
        void *p0 = realloc(e->sid, cap * sizeof *e->sid);
        if (p0)
            e->sid = p0;
        void *p1 = p0 ? realloc(e->prv, cap * sizeof *e->prv) : NULL;
        if (p1)
            e->prv = p1;
        void *p2 = p1 ? realloc(e->nxt, cap * sizeof *e->nxt) : NULL;
        if (p2)
            e->nxt = p2;
        void *p3 = p2 ? realloc(e->slen, cap * sizeof *e->slen) : NULL;
        if (p3)
            e->slen = p3;
        if (!p3)
            return bk_fail(e->err, BK_ERR_NOMEM, "out of memory for a word of %zu bytes", n);
        e->sym_cap = cap;
    }
    /* the symbols: one per byte; a byte outside the vocabulary is unk (fused with fuse_unk) or dropped */
    size_t m = 0;
    int32_t unk = -1;
    uint32_t unk_len = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_id[u[i]];
        if (id >= 0) {
            if (unk >= 0) {
                e->sid[m] = unk, e->slen[m++] = unk_len;
                unk = -1;
            }
            e->sid[m] = id, e->slen[m++] = 1;
        } else if (t->unk_id >= 0) {
            if (unk >= 0 && t->fuse_unk) {
                unk_len++;
            } else {
                if (unk >= 0)
                    e->sid[m] = unk, e->slen[m++] = unk_len;
                unk = t->unk_id, unk_len = 1;
            }
        }
    }
    if (unk >= 0)
        e->sid[m] = unk, e->slen[m++] = unk_len;
    for (size_t i = 0; i < m; i++) {
        e->prv[i] = (int32_t)i - 1;
        e->nxt[i] = i + 1 < m ? (int32_t)i + 1 : -1;
    }
    if (m > 1) {
        if (grow((void **)&e->heap, &e->heap_cap, 2 * m + 8, sizeof *e->heap))
            return bk_fail(e->err, BK_ERR_NOMEM, "out of memory");
        e->heap_n = 0;
        for (size_t i = 0; i + 1 < m; i++)
            try_pair(e, i, i + 1);
        while (e->heap_n) {
            heap_item top = heap_pop(e);
            size_t pos = top.pos;
            if (e->slen[pos] == 0 || e->nxt[pos] < 0)
                continue;
            size_t right = (size_t)e->nxt[pos];
            uint32_t rank;
            int32_t nid;
            if (!pair_find(t, e->sid[pos], e->sid[right], &rank, &nid) || nid != top.new_id)
                continue; /* a stale entry */
            e->sid[pos] = top.new_id;
            e->slen[pos] += e->slen[right];
            e->nxt[pos] = e->nxt[right];
            e->slen[right] = 0;
            if (e->nxt[pos] >= 0)
                e->prv[e->nxt[pos]] = (int32_t)pos;
            /* each merge removes a symbol and adds at most two entries: the heap stays within 2m */
            if (e->heap_n + 2 > e->heap_cap &&
                grow((void **)&e->heap, &e->heap_cap, e->heap_n + 2, sizeof *e->heap))
                return bk_fail(e->err, BK_ERR_NOMEM, "out of memory");
            if (e->prv[pos] >= 0)
                try_pair(e, (size_t)e->prv[pos], pos);
            if (e->nxt[pos] >= 0)
                try_pair(e, pos, (size_t)e->nxt[pos]);
        }
    }
    size_t first = e->n;
    for (size_t i = 0; i < m; i++)
        if (e->slen[i] && push_id(e, e->sid[i]))
            return e->err->code;
    if (n <= CACHE_KEY_MAX && e->n > first) /* a word of no tokens (every byte unknown) is not kept */
        cache_put(e, w, n, h, e->ids + first, e->n - first);
    return BK_OK;
}

/* HF's find_matches of a regex over one piece: the gaps and the matches in order. */
typedef struct re_iter {
    const pcre2_code *re;
    const char *s;
    size_t n, pos, prev, last_end;
    int have_last, done, pending;
    size_t pa, pb;
} re_iter;

static void re_start(re_iter *it, const pcre2_code *re, const char *s, size_t n)
{
    memset(it, 0, sizeof *it);
    it->re = re;
    it->s = s;
    it->n = n;
}

/* 1 with the next segment, 0 at the end, an error code (< 0 from the error's negation) on failure. */
static int re_next(enc *e, re_iter *it, size_t *a, size_t *b, int *is_match)
{
    if (it->pending) {
        it->pending = 0;
        *a = it->pa, *b = it->pb, *is_match = 1;
        return 1;
    }
    while (!it->done) {
        if (it->pos > it->n) {
            it->done = 1;
            break;
        }
        int rc = pcre2_match(it->re, (PCRE2_SPTR)it->s, it->n, it->pos, PCRE2_NO_UTF_CHECK, e->md, e->mc);
        if (rc == PCRE2_ERROR_NOMATCH) {
            it->done = 1;
            break;
        }
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            bk_fail(e->err, BK_ERR_INVALID, "a pre-tokenizer regex failed on a piece of %zu bytes: %s", it->n,
                    (const char *)msg);
            return -1;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
        size_t ms = ov[0], me = ov[1];
        if (me < ms || ms < it->prev) { /* \K tricks: a match that does not move forward */
            bk_fail(e->err, BK_ERR_UNSUPPORTED, "a pre-tokenizer regex reported a match before its start");
            return -1;
        }
        if (ms == me && it->have_last && me == it->last_end) {
            if (me >= it->n) {
                it->done = 1;
                break;
            }
            uint32_t cp;
            size_t k = utf8_seq((const unsigned char *)it->s + me, it->n - me, &cp);
            it->pos = me + (k ? k : 1);
            continue;
        }
        it->pos = me;
        it->last_end = me;
        it->have_last = 1;
        if (it->prev != ms) {
            *a = it->prev, *b = ms, *is_match = 0;
            it->pending = 1, it->pa = ms, it->pb = me;
            it->prev = me;
            return 1;
        }
        it->prev = me;
        *a = ms, *b = me, *is_match = 1;
        return 1;
    }
    if (it->prev != it->n) {
        *a = it->prev, *b = it->n, *is_match = 0;
        it->prev = it->n;
        return 1;
    }
    return 0;
}

/* The last step, ByteLevel, on text piece p[0..n). */
static int byte_level(enc *e, const char *p, size_t n)
{
    const bk_bpe *t = e->t;
    if (t->bl_prefix && p[0] != ' ') {
        if (grow((void **)&e->scratch, &e->scratch_cap, n + 1, 1))
            return bk_fail(e->err, BK_ERR_NOMEM, "out of memory");
        e->scratch[0] = ' ';
        memcpy(e->scratch + 1, p, n);
        p = e->scratch;
        n++;
    }
    if (!t->bl_regex)
        return bpe_word(e, p, n);
    re_iter it;
    re_start(&it, t->bl_re, p, n);
    size_t a, b;
    int m, r;
    while ((r = re_next(e, &it, &a, &b, &m)) > 0)
        if (b > a && bpe_word(e, p + a, b - a))
            return e->err->code;
    return r < 0 ? e->err->code : BK_OK;
}

static int run_step(enc *e, int level, size_t s, size_t n);

static int emit(enc *e, int level, size_t s, size_t a, size_t b)
{
    return b > a ? run_step(e, level + 1, s + a, b - a) : BK_OK;
}

/* Pre-tokenizer step `level` on text[s .. s + n), each piece on to the next step (HF's split behaviours). */
static int run_step(enc *e, int level, size_t s, size_t n)
{
    const bk_bpe *t = e->t;
    if (level == t->n_steps)
        return byte_level(e, e->text + s, n);
    const step *st = &t->steps[level];
    re_iter it;
    re_start(&it, st->re, e->text + s, n);
    size_t a, b, pa = 0, pb = 0;
    int m, r, have = 0, prev_match = 0, rc = BK_OK;
    while (rc == BK_OK && (r = re_next(e, &it, &a, &b, &m)) > 0) {
        if (st->invert)
            m = !m;
        switch (st->behavior) {
        case BH_ISOLATED:
            rc = emit(e, level, s, a, b);
            break;
        case BH_REMOVED:
            if (!m)
                rc = emit(e, level, s, a, b);
            break;
        case BH_PREVIOUS:
            if (m && !prev_match && have) {
                pb = b;
            } else {
                if (have)
                    rc = emit(e, level, s, pa, pb);
                have = 1, pa = a, pb = b;
            }
            break;
        case BH_CONTIGUOUS:
            if (m == prev_match && have) {
                pb = b;
            } else {
                if (have)
                    rc = emit(e, level, s, pa, pb);
                have = 1, pa = a, pb = b;
            }
            break;
        default: /* BH_NEXT: a match joins the piece after it unless that one is a match too */
            if (have) {
                if (!m) {
                    rc = emit(e, level, s, pa, b);
                    have = 0;
                } else {
                    rc = emit(e, level, s, pa, pb);
                    pa = a, pb = b;
                }
            } else if (m) {
                have = 1, pa = a, pb = b;
            } else {
                rc = emit(e, level, s, a, b);
            }
            break;
        }
        prev_match = m;
    }
    if (rc != BK_OK)
        return rc;
    if (r < 0)
        return e->err->code;
    return have ? emit(e, level, s, pa, pb) : BK_OK;
}

/* Splits the added tokens of set `pass` out of text[s .. s + n), leftmost-longest; the rest goes to the
 * next pass, then to the pre-tokenizer. */
static int split_added(enc *e, int pass, size_t s, size_t n)
{
    const bk_bpe *t = e->t;
    if (pass == 2)
        return run_step(e, 0, s, n);
    const added_set *set = &t->sets[pass];
    if (!set->n)
        return split_added(e, pass + 1, s, n);
    const unsigned char *u = (const unsigned char *)e->text;
    size_t end = s + n, gap = s, pos = s;
    while (pos < end) {
        unsigned c = u[pos];
        int best = -1;
        size_t best_len = 0;
        for (int k = set->start[c]; k < set->start[c + 1]; k++) {
            int id = set->ids[k];
            size_t len = t->tok_len[id];
            if (len > best_len && len <= end - pos && memcmp(u + pos, t->tok[id], len) == 0)
                best = id, best_len = len;
        }
        if (best < 0) {
            pos++;
            continue;
        }
        if (gap < pos && split_added(e, pass + 1, gap, pos - gap))
            return e->err->code;
        if (push_id(e, best))
            return e->err->code;
        pos += best_len;
        gap = pos;
    }
    return gap < end ? split_added(e, pass + 1, gap, end - gap) : BK_OK;
}

int bk_bpe_encode(const bk_bpe *t, const char *text, size_t len, int32_t **ids, size_t *n, bk_error *err)
{
    *ids = NULL;
    *n = 0;
    size_t bad = utf8_invalid_at(text, len);
    if (bad < len)
        return bk_fail(err, BK_ERR_INVALID, "the text is not valid UTF-8 at byte offset %zu (byte 0x%02x)", bad,
                       (unsigned)(unsigned char)text[bad]);
    enc e;
    memset(&e, 0, sizeof e);
    e.t = t;
    e.text = text;
    e.err = err;
    e.md = pcre2_match_data_create(1, NULL);
    e.mc = pcre2_match_context_create(NULL);
    e.js = pcre2_jit_stack_create(32 << 10, 8 << 20, NULL);
    int rc;
    if (!e.md || !e.mc) {
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory");
    } else {
        if (e.js)
            pcre2_jit_stack_assign(e.mc, NULL, e.js);
        rc = len ? split_added(&e, 0, 0, len) : BK_OK;
    }
    pcre2_match_data_free(e.md);
    pcre2_match_context_free(e.mc);
    pcre2_jit_stack_free(e.js);
    free(e.scratch);
    free(e.mapped);
    free(e.sid);
    free(e.prv);
    free(e.nxt);
    free(e.slen);
    free(e.heap);
    free(e.cache);
    free(e.ckeys);
    free(e.cids);
    if (rc != BK_OK) {
        free(e.ids);
        return rc;
    }
    *ids = e.ids;
    *n = e.n;
    return BK_OK;
}

/* ------------------------------------------------------------------ decode */

/* Appends the bytes of token `id` as HF's ByteLevel decoder gives them. */
static int token_bytes(const bk_bpe *t, int id, char **buf, size_t *len, size_t *cap)
{
    const unsigned char *s = (const unsigned char *)t->tok[id];
    size_t n = t->tok_len[id];
    if (grow((void **)buf, cap, *len + n + 1, 1))
        return -1;
    size_t start = *len, i = 0;
    while (i < n) {
        uint32_t cp;
        size_t k = utf8_seq(s + i, n - i, &cp);
        if (!k || cp >= 324 || cp_byte[cp] < 0) {
            memcpy(*buf + start, s, n); /* a character outside the alphabet: the token as it is */
            *len = start + n;
            return 0;
        }
        (*buf)[(*len)++] = (char)cp_byte[cp];
        i += k;
    }
    return 0;
}

int bk_bpe_decode(const bk_bpe *t, const int32_t *ids, size_t n, char **text, size_t *len, bk_error *err)
{
    *text = NULL;
    *len = 0;
    char *buf = NULL;
    size_t used = 0, cap = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_tokens) {
            free(buf);
            return bk_fail(err, BK_ERR_INVALID, "token id %ld at position %zu is out of range (ids are 0 to %d)",
                           (long)ids[i], i, t->n_tokens - 1);
        }
        if (token_bytes(t, ids[i], &buf, &used, &cap)) {
            free(buf);
            return bk_fail(err, BK_ERR_NOMEM, "out of memory decoding %zu tokens", n);
        }
    }
    if (grow((void **)&buf, &cap, used + 1, 1)) {
        free(buf);
        return bk_fail(err, BK_ERR_NOMEM, "out of memory");
    }
    buf[used] = '\0';
    *text = buf;
    *len = used;
    return BK_OK;
}

/* ------------------------------------------------------------------ tokenizer.json out */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int failed;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
    if (b->failed || grow((void **)&b->p, &b->cap, b->n + n + 1, 1)) {
        b->failed = 1;
        return;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= sizeof tmp)
        b->failed = 1;
    else
        sb_put(b, tmp, (size_t)k);
}

static void sb_json(sbuf *b, const char *s, size_t n)
{
    sb_put(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        sb_put(b, s + run, i - run);
        run = i + 1;
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            sb_put(b, esc, 2);
        } else if (c == '\n') {
            sb_put(b, "\\n", 2);
        } else if (c == '\t') {
            sb_put(b, "\\t", 2);
        } else if (c == '\r') {
            sb_put(b, "\\r", 2);
        } else {
            sb_printf(b, "\\u%04x", c);
        }
    }
    sb_put(b, s + run, n - run);
    sb_put(b, "\"", 1);
}

static const char *tf(int v) { return v ? "true" : "false"; }

int bk_bpe_to_hf_json(const bk_bpe *t, char **text, size_t *len, bk_error *err)
{
    *text = NULL;
    *len = 0;
    sbuf b = {0};
    sb_str(&b, "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [");
    for (int i = 0; i < t->n_added; i++) {
        int id = t->added[i];
        sb_printf(&b, "%s\n    {\"id\": %d, \"content\": ", i ? "," : "", id);
        sb_json(&b, t->tok[id], t->tok_len[id]);
        sb_printf(&b, ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": %s, "
                      "\"special\": %s}",
                  tf(t->flags[id] & F_NORMALIZED), tf(t->flags[id] & F_SPECIAL));
    }
    sb_str(&b, t->n_added ? "\n  ],\n" : "],\n");
    sb_str(&b, "  \"normalizer\": null,\n  \"pre_tokenizer\": ");
    if (t->n_steps)
        sb_str(&b, "{\"type\": \"Sequence\", \"pretokenizers\": [");
    for (int i = 0; i < t->n_steps; i++) {
        const step *s = &t->steps[i];
        if (s->kind == STEP_DIGITS) {
            sb_printf(&b, "\n    {\"type\": \"Digits\", \"individual_digits\": %s},", tf(s->individual));
            continue;
        }
        sb_printf(&b, "\n    {\"type\": \"Split\", \"pattern\": {\"%s\": ", s->is_regex ? "Regex" : "String");
        sb_json(&b, s->pattern, strlen(s->pattern));
        sb_printf(&b, "}, \"behavior\": \"%s\", \"invert\": %s},", behavior_names[s->behavior], tf(s->invert));
    }
    sb_printf(&b, "%s{\"type\": \"ByteLevel\", \"add_prefix_space\": %s, \"trim_offsets\": %s, \"use_regex\": %s}%s,\n",
              t->n_steps ? "\n    " : "", tf(t->bl_prefix), tf(t->bl_trim), tf(t->bl_regex),
              t->n_steps ? "\n  ]}" : "");
    sb_str(&b, "  \"post_processor\": null,\n  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, "
               "\"trim_offsets\": true, \"use_regex\": true},\n");
    sb_str(&b, "  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": ");
    if (t->unk_id >= 0)
        sb_json(&b, t->tok[t->unk_id], t->tok_len[t->unk_id]);
    else
        sb_str(&b, "null");
    sb_printf(&b, ",\n    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n    \"fuse_unk\": %s,\n"
                  "    \"byte_fallback\": false,\n    \"ignore_merges\": %s,\n",
              tf(t->fuse_unk), tf(t->ignore_merges));
    sb_printf(&b, "    \"biaskit\": {\"bos_id\": %d, \"eos_id\": %d},\n    \"vocab\": {", t->bos, t->eos);
    for (int id = 0; id < t->n_model; id++) {
        sb_str(&b, id ? ",\n      " : "\n      ");
        sb_json(&b, t->tok[id], t->tok_len[id]);
        sb_printf(&b, ": %d", id);
    }
    sb_str(&b, "\n    },\n    \"merges\": [");
    for (size_t r = 0; r < t->n_merges; r++) {
        int a = t->merges[2 * r], c = t->merges[2 * r + 1];
        sb_str(&b, r ? ",\n      [" : "\n      [");
        sb_json(&b, t->tok[a], t->tok_len[a]);
        sb_str(&b, ", ");
        sb_json(&b, t->tok[c], t->tok_len[c]);
        sb_str(&b, "]");
    }
    sb_str(&b, t->n_merges ? "\n    ]\n  }\n}\n" : "]\n  }\n}\n");
    if (b.failed) {
        free(b.p);
        return bk_fail(err, BK_ERR_NOMEM, "out of memory writing the tokenizer.json");
    }
    *text = b.p;
    *len = b.n;
    return BK_OK;
}
