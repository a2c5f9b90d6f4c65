// grammar: constrained decoding. GBNF text (or a JSON Schema turned into GBNF, schema.h)
// compiles to a pushdown automaton over bytes; a matcher follows one generation through it
// and gives, for its state, the mask of vocabulary tokens whose bytes the automaton can take
// next (a walk of a trie of the token bytes, cached per state). No engine state here: the
// lane host owns one matcher per constrained request.
#ifndef LANES_GRAMMAR_H
#define LANES_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// Bounds on what one grammar may cost; compiling past one fails with LANES_ELIMIT.
typedef struct {
	size_t max_text;        // bytes of GBNF text
	int32_t max_rules;      // rules, the ones groups and repetitions expand into included
	int64_t max_elements;   // elements over all rules after expansion
	int32_t max_depth;      // nesting of groups in the text
	int32_t max_repeat;     // m and n of {m,n}
	int32_t max_stacks;     // stacks one matcher state may hold (ambiguity); past it accept fails
	int64_t max_explore;    // work (steps, stacks stepped, expansions) compile may spend looking
	                        // for a state past max_stacks
} grammar_limits;

// Defaults: 1 MiB text, 65536 rules, 4M elements, depth 64, repeat 1000, 4096 stacks, 1M of
// work explored. Thread-safe.
void grammar_default_limits(grammar_limits *l);

typedef struct grammar grammar;

// Compiles GBNF (llama.cpp's format: `name ::= alternatives`, `|`, groups, `? * +`, `{m}`,
// `{m,}`, `{m,n}`, "literals" and [classes] with \n \t \r \\ \" \] \xHH \uHHHH \UHHHHHHHH
// escapes, ranges and ^ negation, `.` any character, # comments) with start rule `root`.
// Characters are Unicode code points matched as their UTF-8 bytes. Undefined rules and left
// recursion are refused. The states reachable from the start are explored breadth first,
// those reaching grammar elements not yet seen first, within a budget that grows with the
// grammar up to max_explore: one whose stacks pass max_stacks is refused (LANES_ELIMIT naming
// the rule and a text that leads there), so ambiguity found here never ends a generation
// midway. 0 with *out holding one reference; LANES_EFORMAT with "line L, column C: message"
// in err; LANES_ELIMIT (with the position too where one applies); LANES_ENOMEM. lim NULL:
// the defaults. Thread-safe.
int grammar_compile(grammar **out, const char *text, size_t len, const grammar_limits *lim, char *err,
		    size_t errlen);
// Another reference to g (returned). Thread-safe.
grammar *grammar_ref(grammar *g);
// Drops a reference; the last one frees g. Accepts NULL. Thread-safe.
void grammar_unref(grammar *g);

// The vocabulary as the automaton sees it: every token's bytes as the detokenizer emits
// them mid-text. Immutable after creation; shared by every matcher over it.
typedef struct grammar_vocab grammar_vocab;
// piece[i] (len[i] bytes) for i < n. A token with usable[i] false (control tokens, empty
// pieces) is never in a mask, except the eog ids (n_eog of them), which a mask holds exactly
// when the text so far is a whole sentence of the grammar. 0 or LANES_ENOMEM. Thread-safe.
int grammar_vocab_new(grammar_vocab **out, int32_t n, const char *const *piece, const uint32_t *len,
		      const bool *usable, const int32_t *eog, size_t n_eog);
void grammar_vocab_free(grammar_vocab *v); // accepts NULL; no matcher over v may remain
int32_t grammar_vocab_size(const grammar_vocab *v);

// One generation's position in a grammar. Not thread-safe: one thread at a time per matcher.
typedef struct grammar_matcher grammar_matcher;
// A matcher at the start of g (it takes a reference to g). With triggers (n_triggers
// strings, none empty), it is lazy: any usable token passes until the generated text
// contains a trigger; from that trigger's first byte on, the text must be a sentence of g
// (so g's sentences begin with a trigger). While untriggered, a token that completes a
// trigger is allowed only when its bytes from the trigger on are a prefix g accepts.
// 0, LANES_EINVAL (bad triggers, message in err) or LANES_ENOMEM.
int grammar_matcher_new(grammar_matcher **out, grammar *g, const grammar_vocab *v, const char *const *triggers,
			int n_triggers, char *err, size_t errlen);
void grammar_matcher_free(grammar_matcher *m); // accepts NULL
// The tokens allowed next: bit (id % 64) of (*mask)[id / 64] is set when id may follow;
// (n + 63) / 64 words. Valid until the next call on m. The same state gives the same mask,
// whatever came before. It may hold no token: every way on is past max_stacks beyond what
// compile explored, or no token's bytes fit. 0 or LANES_ENOMEM.
int grammar_matcher_mask(grammar_matcher *m, const uint64_t **mask);
// Takes token id. An eog id is taken only in an accepting state (and ends the matcher).
// 0, or LANES_EINVAL when the grammar does not allow id here (m is unchanged then).
int grammar_matcher_accept(grammar_matcher *m, int32_t id);
// Takes raw bytes, as accept does a token's. 0, or LANES_EINVAL (m unchanged).
int grammar_matcher_accept_bytes(grammar_matcher *m, const char *s, size_t n);
// The text so far is a whole sentence of g (an untriggered lazy matcher: always true).
bool grammar_matcher_accepting(const grammar_matcher *m);
// Accepting, and no byte may follow: generation must end here.
bool grammar_matcher_finished(const grammar_matcher *m);
// A lazy matcher has seen a trigger (a matcher without triggers: always true).
bool grammar_matcher_triggered(const grammar_matcher *m);

#endif
