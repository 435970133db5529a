/*
 * harness.c -- fixture generator for mvgpt's llama2.c compatibility tests.
 *
 * This file is ours. It does NOT contain llama2.c's code: it includes run.c from a
 * llama2.c checkout at build time and calls run.c's own functions (build_transformer,
 * build_tokenizer, encode, decode, forward, sample_argmax, ...):
 *
 *     gcc -O2 -I/path/to/llama2.c -o harness harness.c -lm
 *
 * Modes (all output is one JSON object per line on stdout; strings are hex-encoded so
 * that arbitrary bytes survive):
 *
 *   harness encode TOKENIZER VOCAB_SIZE PROMPTS_FILE
 *       PROMPTS_FILE: one hex-encoded prompt per line (an empty line is the empty prompt).
 *       For each prompt:
 *         {"prompt_hex", "ids" (run.c encode, bos=1 eos=0),
 *          "decoded_hex" (concatenation of decode(prev, tok) over ids[1:], prev = id before),
 *          "printed_hex" (what run.c's safe_printf would print for those same pieces)}
 *
 *   harness generate CHECKPOINT TOKENIZER STEPS PROMPT_HEX
 *       run.c's generate() loop with temperature 0 (sample_argmax), printing
 *         {"model", "format", "prompt_hex", "steps", "ids", "n_forward", "stop",
 *          "text_hex", "printed_hex", "logits": {"0": [...], "1": [...], "2": [...], "<last>": [...]}}
 *       ids: prompt ids (BOS first) and then the generated ids, i.e. ids[0] and every `next`
 *       that run.c printed; a terminating BOS (=1) is NOT included ("stop": "bos"),
 *       otherwise "stop": "steps". logits[p] is forward(transformer, ids[p], p) (%.9g),
 *       for p in {0, 1, 2, n_forward-1}. printed_hex is exactly run.c's stdout
 *       (safe_printf of each piece, then "\n").
 *       STEPS is clamped exactly like run.c's main (0 or > seq_len -> seq_len).
 *       CHECKPOINT may be a legacy (v0) file, which run.c reads with build_transformer, or
 *       an export.py version-1 ("ak42") file, which run.c cannot read; for the latter this
 *       harness maps the weights itself (load_v1 below, layout from export.py's
 *       version1_export) and then uses run.c's forward unchanged.
 */
#define main run_c_main
#include "run.c"
#undef main

#include <stdint.h>

/* ------------------------------------------------------------------------- */
/* helpers */

static void print_hex(const unsigned char *s, size_t n) {
    static const char *d = "0123456789abcdef";
    putchar('"');
    for (size_t i = 0; i < n; i++) { putchar(d[s[i] >> 4]); putchar(d[s[i] & 15]); }
    putchar('"');
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* decode a hex string into a freshly malloc'd NUL-terminated buffer */
static char *unhex(const char *h, size_t *out_len) {
    size_t n = strlen(h);
    while (n > 0 && (h[n-1] == '\n' || h[n-1] == '\r')) n--;
    if (n % 2) { fprintf(stderr, "odd hex length\n"); exit(EXIT_FAILURE); }
    char *s = malloc(n / 2 + 1);
    for (size_t i = 0; i < n / 2; i++) {
        int a = hexval(h[2*i]), b = hexval(h[2*i+1]);
        if (a < 0 || b < 0) { fprintf(stderr, "bad hex\n"); exit(EXIT_FAILURE); }
        s[i] = (char)(a * 16 + b);
        if (s[i] == '\0') { fprintf(stderr, "NUL byte in prompt\n"); exit(EXIT_FAILURE); }
    }
    s[n / 2] = '\0';
    if (out_len) *out_len = n / 2;
    return s;
}

/* growable byte buffer */
typedef struct { unsigned char *p; size_t n, cap; } Buf;
static void buf_add(Buf *b, const char *s) {
    size_t k = strlen(s);
    if (b->n + k + 1 > b->cap) {
        b->cap = (b->n + k + 1) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, k);
    b->n += k;
}

/* exactly the printing rule of run.c's safe_printf, but appending to a buffer */
static void safe_append(Buf *b, char *piece) {
    if (piece == NULL) { return; }
    if (piece[0] == '\0') { return; }
    if (piece[1] == '\0') {
        unsigned char byte_val = piece[0];
        if (!(isprint(byte_val) || isspace(byte_val))) {
            return;
        }
    }
    buf_add(b, piece);
}

static void print_ids(const int *ids, int n) {
    putchar('[');
    for (int i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
    putchar(']');
}

/* ------------------------------------------------------------------------- */
/* export.py version 1 ("ak42") loader: header is 256 bytes
 *   uint32 magic 0x616b3432, int32 version (1), 7 x int32 params
 *   (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, max_seq_len),
 *   uint8 shared_classifier, zero padding to 256 bytes.
 * then fp32 tensors in this order: attention_norm[L], ffn_norm[L], norm, tok_embeddings,
 * wq[L], wk[L], wv[L], wo[L], w1[L], w2[L], w3[L], (output if not shared). */

static int load_v1(Transformer *t, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "Couldn't open file %s\n", path); exit(EXIT_FAILURE); }
    uint32_t magic = 0;
    if (fread(&magic, 4, 1, f) != 1) { fclose(f); return 0; }
    if (magic != 0x616b3432) { fclose(f); return 0; }
    int32_t version = 0;
    int32_t hdr[7];
    unsigned char shared = 0;
    if (fread(&version, 4, 1, f) != 1 || fread(hdr, 4, 7, f) != 7 || fread(&shared, 1, 1, f) != 1) {
        fprintf(stderr, "short v1 header\n"); exit(EXIT_FAILURE);
    }
    if (version != 1) { fprintf(stderr, "unsupported version %d\n", version); exit(EXIT_FAILURE); }
    fseek(f, 0, SEEK_END);
    t->file_size = ftell(f);
    fclose(f);
    Config *p = &t->config;
    p->dim = hdr[0]; p->hidden_dim = hdr[1]; p->n_layers = hdr[2]; p->n_heads = hdr[3];
    p->n_kv_heads = hdr[4]; p->vocab_size = hdr[5]; p->seq_len = hdr[6];
    t->fd = open(path, O_RDONLY);
    if (t->fd == -1) { fprintf(stderr, "open failed!\n"); exit(EXIT_FAILURE); }
    t->data = mmap(NULL, t->file_size, PROT_READ, MAP_PRIVATE, t->fd, 0);
    if (t->data == MAP_FAILED) { fprintf(stderr, "mmap failed!\n"); exit(EXIT_FAILURE); }
    float *ptr = t->data + 256 / sizeof(float);
    TransformerWeights *w = &t->weights;
    unsigned long long L = p->n_layers;
    int head_size = p->dim / p->n_heads;
    w->rms_att_weight = ptr;   ptr += L * p->dim;
    w->rms_ffn_weight = ptr;   ptr += L * p->dim;
    w->rms_final_weight = ptr; ptr += p->dim;
    w->token_embedding_table = ptr; ptr += (unsigned long long)p->vocab_size * p->dim;
    w->wq = ptr; ptr += L * p->dim * (p->n_heads * head_size);
    w->wk = ptr; ptr += L * p->dim * (p->n_kv_heads * head_size);
    w->wv = ptr; ptr += L * p->dim * (p->n_kv_heads * head_size);
    w->wo = ptr; ptr += L * (p->n_heads * head_size) * p->dim;
    w->w1 = ptr; ptr += L * p->dim * p->hidden_dim;
    w->w2 = ptr; ptr += L * p->hidden_dim * p->dim;
    w->w3 = ptr; ptr += L * p->dim * p->hidden_dim;
    if (shared) { w->wcls = w->token_embedding_table; }
    else { w->wcls = ptr; ptr += (unsigned long long)p->vocab_size * p->dim; }
    if ((char *)ptr - (char *)t->data != t->file_size) {
        fprintf(stderr, "v1 file size mismatch: expected %lld, got %lld\n",
                (long long)((char *)ptr - (char *)t->data), (long long)t->file_size);
        exit(EXIT_FAILURE);
    }
    malloc_run_state(&t->state, &t->config);
    return 1;
}

/* ------------------------------------------------------------------------- */

static int mode_encode(char *tok_path, int vocab_size, const char *prompts_path) {
    Tokenizer tokenizer;
    build_tokenizer(&tokenizer, tok_path, vocab_size);
    FILE *f = fopen(prompts_path, "r");
    if (!f) { fprintf(stderr, "couldn't open %s\n", prompts_path); return 1; }
    static char line[1 << 20];
    while (fgets(line, sizeof line, f)) {
        size_t n;
        char *prompt = unhex(line, &n);
        int *ids = malloc((strlen(prompt) + 3) * sizeof(int)); /* as run.c's generate */
        int n_ids = 0;
        encode(&tokenizer, prompt, 1, 0, ids, &n_ids);
        Buf dec = {0}, pr = {0};
        buf_add(&dec, ""); buf_add(&pr, "");
        for (int i = 1; i < n_ids; i++) {
            char *piece = decode(&tokenizer, ids[i-1], ids[i]);
            buf_add(&dec, piece);
            safe_append(&pr, piece);
        }
        printf("{\"prompt_hex\": "); print_hex((unsigned char *)prompt, n);
        printf(", \"ids\": "); print_ids(ids, n_ids);
        printf(", \"decoded_hex\": "); print_hex(dec.p, dec.n);
        printf(", \"printed_hex\": "); print_hex(pr.p, pr.n);
        printf("}\n");
        free(dec.p); free(pr.p); free(ids); free(prompt);
    }
    fclose(f);
    free_tokenizer(&tokenizer);
    return 0;
}

static void print_logits(const char *key, const float *l, int n, int first) {
    printf("%s\"%s\": [", first ? "" : ", ", key);
    for (int i = 0; i < n; i++) printf(i ? ", %.9g" : "%.9g", l[i]);
    putchar(']');
}

static int mode_generate(char *ckpt, char *tok_path, int steps, const char *prompt_hex) {
    Transformer transformer;
    const char *format = "v1-ak42";
    if (!load_v1(&transformer, ckpt)) {
        format = "v0-legacy";
        build_transformer(&transformer, ckpt);
    }
    Config *c = &transformer.config;
    if (steps < 0) steps = 0;
    if (steps == 0 || steps > c->seq_len) steps = c->seq_len; /* as run.c's main */
    Tokenizer tokenizer;
    build_tokenizer(&tokenizer, tok_path, c->vocab_size);
    size_t plen;
    char *prompt = unhex(prompt_hex, &plen);
    int V = c->vocab_size;

    /* ---- run.c's generate(), temperature 0, with bookkeeping ---- */
    int num_prompt_tokens = 0;
    int *prompt_tokens = (int *)malloc((strlen(prompt) + 3) * sizeof(int));
    encode(&tokenizer, prompt, 1, 0, prompt_tokens, &num_prompt_tokens);
    if (num_prompt_tokens < 1) { fprintf(stderr, "expected at least 1 prompt token\n"); exit(EXIT_FAILURE); }
    int *ids = malloc((steps + 2) * sizeof(int));
    int n_ids = 0;
    float *saved = calloc((size_t)4 * V, sizeof(float)); /* pos 0, 1, 2, last */
    Buf text = {0}, printed = {0};
    buf_add(&text, ""); buf_add(&printed, "");
    const char *stop = "steps";

    int next;
    int token = prompt_tokens[0];
    ids[n_ids++] = token;
    int pos = 0;
    while (pos < steps) {
        float *logits = forward(&transformer, token, pos);
        if (pos < 3) memcpy(saved + (size_t)pos * V, logits, V * sizeof(float));
        memcpy(saved + (size_t)3 * V, logits, V * sizeof(float));
        if (pos < num_prompt_tokens - 1) {
            next = prompt_tokens[pos + 1];
        } else {
            next = sample_argmax(logits, V); /* run.c's sample() with temperature == 0 */
        }
        pos++;
        if (next == 1) { stop = "bos"; break; }
        char *piece = decode(&tokenizer, token, next);
        buf_add(&text, piece);
        safe_append(&printed, piece);
        ids[n_ids++] = next;
        token = next;
    }
    buf_add(&printed, "\n");
    int n_forward = pos;

    const char *base = strrchr(ckpt, '/');
    base = base ? base + 1 : ckpt;
    printf("{\"model\": \"%s\", \"format\": \"%s\", \"prompt_hex\": ", base, format);
    print_hex((unsigned char *)prompt, plen);
    printf(", \"steps\": %d, \"ids\": ", steps);
    print_ids(ids, n_ids);
    printf(", \"n_forward\": %d, \"stop\": \"%s\", \"text_hex\": ", n_forward, stop);
    print_hex(text.p, text.n);
    printf(", \"printed_hex\": ");
    print_hex(printed.p, printed.n);
    printf(", \"logits\": {");
    int first = 1;
    char key[32];
    for (int p = 0; p < 3 && p < n_forward; p++) {
        snprintf(key, sizeof key, "%d", p);
        print_logits(key, saved + (size_t)p * V, V, first);
        first = 0;
    }
    if (n_forward - 1 >= 3) {
        snprintf(key, sizeof key, "%d", n_forward - 1);
        print_logits(key, saved + (size_t)3 * V, V, first);
    }
    printf("}}\n");

    free(saved); free(ids); free(prompt_tokens); free(prompt);
    free(text.p); free(printed.p);
    free_tokenizer(&tokenizer);
    free_transformer(&transformer);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "encode") == 0) {
        return mode_encode(argv[2], atoi(argv[3]), argv[4]);
    }
    if (argc == 6 && strcmp(argv[1], "generate") == 0) {
        return mode_generate(argv[2], argv[3], atoi(argv[4]), argv[5]);
    }
    fprintf(stderr,
            "usage: %s encode TOKENIZER VOCAB_SIZE PROMPTS_FILE\n"
            "       %s generate CHECKPOINT TOKENIZER STEPS PROMPT_HEX\n", argv[0], argv[0]);
    return 2;
}
