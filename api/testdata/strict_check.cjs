// strict_check.cjs: checks schemas with the openai package's own
// toStrictJsonSchema (openai/lib/transform), run by api's TestStrictSchemas
// Against OpenAI under Node 22 from scripts/ensure-mcp-deps.
//
//   node strict_check.cjs OPENAI_DIR INPUT.json
//
// INPUT is {"strict": {name: schema}, "refused": {name: schema}}. For each
// strict schema, toStrictJsonSchema must accept it and return it unchanged
// (it is already what strict mode wants); for each refused one it must throw.
// Prints one JSON object: {"ok": [...], "problems": [...]} and exits 0.
const path = require('path');
const fs = require('fs');
const { toStrictJsonSchema } = require(path.join(process.argv[2], 'lib', 'transform.js'));
const input = JSON.parse(fs.readFileSync(process.argv[3], 'utf8'));

function canon(v) {
  if (Array.isArray(v)) return v.map(canon);
  if (v && typeof v === 'object') {
    const out = {};
    for (const k of Object.keys(v).sort()) out[k] = canon(v[k]);
    return out;
  }
  return v;
}

const ok = [];
const problems = [];
for (const [name, schema] of Object.entries(input.strict || {})) {
  try {
    const out = toStrictJsonSchema(schema);
    const a = JSON.stringify(canon(schema));
    const b = JSON.stringify(canon(out));
    if (a !== b) {
      problems.push({ name, problem: 'toStrictJsonSchema changed the schema', given: a, got: b });
    } else {
      ok.push(name);
    }
  } catch (e) {
    problems.push({ name, problem: 'toStrictJsonSchema refused the schema: ' + e.message });
  }
}
for (const [name, schema] of Object.entries(input.refused || {})) {
  try {
    toStrictJsonSchema(schema);
    problems.push({ name, problem: 'toStrictJsonSchema accepted a schema StrictSchema refuses' });
  } catch (e) {
    ok.push(name + ' (refused: ' + e.message + ')');
  }
}
process.stdout.write(JSON.stringify({ ok, problems }));
