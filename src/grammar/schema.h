// grammar, schemas: a JSON Schema (the subset structured outputs use) turned into GBNF text
// whose sentences are exactly the JSON documents valid against it, compact whitespace.
#ifndef LANES_GRAMMAR_SCHEMA_H
#define LANES_GRAMMAR_SCHEMA_H

#include <jansson.h>
#include <stddef.h>

// GBNF for schema with its start rule named root and every helper rule named root-<...>, so
// several schemas' rules can share one grammar under different roots. Supported: type
// (and type arrays), properties, required, additionalProperties (bool or schema), items,
// prefixItems, minItems/maxItems, enum, const, anyOf/oneOf, allOf of objects, $ref to
// #/$defs/... and #/definitions/..., string format date/time/date-time/uuid, minLength/
// maxLength, pattern (a plain regex), minimum/maximum (exclusive too; whole for numbers), nullable;
// annotations (title, description, examples, default, $schema, $id, $comment) are ignored.
// Keys in declared order; extra keys only with additionalProperties true/a schema or no properties.
// On success *out is malloc'd GBNF (free() it) and 0 is returned. Otherwise LANES_EINVAL with
// "unsupported keyword 'KEY' at /json/pointer" (or what else is wrong, and where) in err,
// LANES_ELIMIT when the schema is too deep or large, LANES_ENOMEM. Never relaxes silently.
// Thread-safe.
int grammar_schema_gbnf(const json_t *schema, const char *root, char **out, char *err, size_t errlen);

// As grammar_schema_gbnf, for schemas that are best effort (tools not marked strict): what
// cannot be checked is relaxed instead of refused, and the keyword named in relaxed.
int grammar_schema_gbnf_relaxed(const json_t *schema, const char *root, char **out, char *relaxed, size_t relaxedlen,
				char *err, size_t errlen);

// GBNF with start rule `root` for any JSON object (response_format json_object). Static.
const char *grammar_json_object_gbnf(void);

#endif
