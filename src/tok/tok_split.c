/* GPT-2's pre-tokenizer rule, as a scanner instead of a regex: the pieces of
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * matched leftmost-first, the way Python's regex and JavaScript's engines take the first
 * alternative that matches at each position. Classes from tok_unicode.h. */
#include "tok/tok_unicode.h"

/* ASCII: letters, digits, White_Space (tab, LF, VT, FF, CR, space); the rest is other. */
const uint8_t tok_ascii_class[128] = {
    ['\t'] = TOK_US, ['\n'] = TOK_US, ['\v'] = TOK_US, ['\f'] = TOK_US, ['\r'] = TOK_US, [' '] = TOK_US,
    ['0'] = TOK_UN, ['1'] = TOK_UN, ['2'] = TOK_UN, ['3'] = TOK_UN, ['4'] = TOK_UN,
    ['5'] = TOK_UN, ['6'] = TOK_UN, ['7'] = TOK_UN, ['8'] = TOK_UN, ['9'] = TOK_UN,
    ['A'] = TOK_UL, ['B'] = TOK_UL, ['C'] = TOK_UL, ['D'] = TOK_UL, ['E'] = TOK_UL, ['F'] = TOK_UL,
    ['G'] = TOK_UL, ['H'] = TOK_UL, ['I'] = TOK_UL, ['J'] = TOK_UL, ['K'] = TOK_UL, ['L'] = TOK_UL,
    ['M'] = TOK_UL, ['N'] = TOK_UL, ['O'] = TOK_UL, ['P'] = TOK_UL, ['Q'] = TOK_UL, ['R'] = TOK_UL,
    ['S'] = TOK_UL, ['T'] = TOK_UL, ['U'] = TOK_UL, ['V'] = TOK_UL, ['W'] = TOK_UL, ['X'] = TOK_UL,
    ['Y'] = TOK_UL, ['Z'] = TOK_UL,
    ['a'] = TOK_UL, ['b'] = TOK_UL, ['c'] = TOK_UL, ['d'] = TOK_UL, ['e'] = TOK_UL, ['f'] = TOK_UL,
    ['g'] = TOK_UL, ['h'] = TOK_UL, ['i'] = TOK_UL, ['j'] = TOK_UL, ['k'] = TOK_UL, ['l'] = TOK_UL,
    ['m'] = TOK_UL, ['n'] = TOK_UL, ['o'] = TOK_UL, ['p'] = TOK_UL, ['q'] = TOK_UL, ['r'] = TOK_UL,
    ['s'] = TOK_UL, ['t'] = TOK_UL, ['u'] = TOK_UL, ['v'] = TOK_UL, ['w'] = TOK_UL, ['x'] = TOK_UL,
    ['y'] = TOK_UL, ['z'] = TOK_UL,
};

int tok_uclass(uint32_t cp) {
    if (cp < 128) return tok_ascii_class[cp];
    int lo = 0, hi = tok_unicode_nranges - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const tok_urange *r = &tok_unicode_ranges[mid];
        if (cp < r->lo) hi = mid - 1;
        else if (cp > r->hi) lo = mid + 1;
        else return (int)r->cls;
    }
    return TOK_UO;
}

/* The end of the run of characters of class cls that starts at i. */
static size_t run_end(const uint8_t *s, size_t n, size_t i, int cls) {
    while (i < n) {
        int c;
        int len = tok_uchar(s + i, n - i, &c);
        if (c != cls) break;
        i += (size_t)len;
    }
    return i;
}

/* 's 't 'm 'd 're 've 'll at s[i] == '\'': the length matched, or 0. */
static size_t contraction(const uint8_t *s, size_t n, size_t i) {
    if (i + 1 >= n) return 0;
    uint8_t a = s[i + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (i + 2 >= n) return 0;
    uint8_t b = s[i + 2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

/* \s+(?!\S) then \s+ at a white-space character: the whole run when it ends the text; else the
 * run less its last character (which goes with what follows), or the one character alone. */
static size_t space_run(const uint8_t *s, size_t n, size_t i) {
    size_t last = i, count = 0;
    while (i < n) {
        int c;
        int len = tok_uchar(s + i, n - i, &c);
        if (c != TOK_US) break;
        last = i;
        i += (size_t)len;
        count++;
    }
    if (i == n || count == 1) return i;
    return last;
}

size_t tok_split_next(const uint8_t *s, size_t n, size_t i) {
    if (s[i] == '\'') {
        size_t k = contraction(s, n, i);
        if (k) return i + k;
    }
    int c;
    if (s[i] == ' ' && i + 1 < n) {
        tok_uchar(s + i + 1, n - i - 1, &c);
        if (c != TOK_US) return run_end(s, n, i + 1, c);
    }
    tok_uchar(s + i, n - i, &c);
    if (c != TOK_US) return run_end(s, n, i, c);
    return space_run(s, n, i);
}
