// grammar, schemas: a JSON Schema (the keywords structured outputs and tool schemas use) turned
// into GBNF text whose sentences are JSON documents valid against it, compact whitespace.
#ifndef LANES_GRAMMAR_SCHEMA_H
#define LANES_GRAMMAR_SCHEMA_H

#include <jansson.h>
#include <stddef.h>

// GBNF for schema with its start rule named root and every helper rule named root-<...>, so
// several schemas' rules can share one grammar under different roots. Every document the
// grammar takes is valid against the schema; where a keyword is written as a subset, some
// valid documents are not taken (said below). Supported:
// - type (and type arrays), nullable, enum and const of any JSON value (both: their
//   intersection; numbers written in their shortest form), anyOf, oneOf (alternatives told
//   apart by type or by a const/enum tag), allOf of objects, $ref to #, #/$defs/... and
//   #/definitions/...;
// - objects: properties, required, additionalProperties (bool or schema), propertyNames (a
//   string schema for every key; an enum of names makes each an optional property),
//   minProperties/maxProperties (counts of extra keys when every declared one is required, or
//   an object not empty), dependentRequired (a dependent of a property that may appear is
//   required: a subset). Keys in declared order; extra keys only with additionalProperties
//   true/a schema or no properties;
// - arrays: items, prefixItems, items as an array with additionalItems, minItems/maxItems;
// - strings: minLength/maxLength (a maxLength past 100000 is none), pattern (a regular
//   expression without lookaround, backreferences or \b; unanchored ones search), format
//   date, time, date-time (RFC 3339; leap years told; at most 6 fraction digits), uuid, ipv4,
//   duration (RFC 3339 appendix A), and as subsets ipv6 (no embedded IPv4), hostname (up to 4
//   labels of up to 62 characters), email (dot-atom of letters, digits, _+- at a domain whose
//   last label is letters), uri and url (http(s), such a host, optional port, path, query,
//   fragment); pattern, format and lengths together must all hold (their automata's product);
// - numbers: minimum/maximum (exclusive too; whole for numbers), multipleOf (integers: a step
//   up to 15 digits, written out between close bounds, else by digits up to what the bounds
//   allow; numbers: whole steps, P/10^n with P dividing 10^n);
// - annotations (title, description, examples, default, deprecated, readOnly, writeOnly,
//   $schema, $id, $comment, $defs, definitions) are ignored.
// On success *out is malloc'd GBNF (free() it) and 0 is returned. Otherwise LANES_EINVAL with
// "unsupported keyword 'KEY' at /json/pointer" (or what else is wrong, and where) in err,
// LANES_ELIMIT when the schema is too deep or large, LANES_ENOMEM. Never relaxes silently.
// Thread-safe.
int grammar_schema_gbnf(const json_t *schema, const char *root, char **out, char *err, size_t errlen);

// As grammar_schema_gbnf, for schemas that are best effort (tools not marked strict): what
// cannot be checked is relaxed instead of refused, and its keyword named in relaxed
// (relaxedlen bytes; NULL: not kept), comma separated, each once, in the order met, reduced to
// letters, digits and $_-. (a name that no longer fits is left out). Relaxing: an assertion
// whose absence only widens a node (not, if/then/else, uniqueItems, contains, dependentSchemas,
// patternProperties, unevaluated*, keywords no draft defines) is dropped; beside enum, const,
// $ref and anyOf the other keywords are dropped; oneOf that may overlap is anyOf; a pattern
// this compiler cannot read, or a format it does not know, is dropped, and a pattern and a
// format together too large to intersect (or with no string in common) keep the pattern;
// bounds that are not whole widen to the whole numbers past them; a required name no
// properties declare is declared with additionalProperties' schema; anything else it cannot
// check (an external $ref, left recursion, allOf of non-objects) makes that node its type, or
// any value when it names none. A malformed or unsatisfiable schema, and the limits, are still
// refused, as above.
int grammar_schema_gbnf_relaxed(const json_t *schema, const char *root, char **out, char *relaxed, size_t relaxedlen,
				char *err, size_t errlen);

// GBNF with start rule `root` for any JSON object (response_format json_object). Static.
const char *grammar_json_object_gbnf(void);

#endif
