// json_schema.test.mjs — the JSON Schema keywords zod and pydantic emit, compiled into the grammar
// that constrains generation, checked end to end against ajv.
//
// Starts `sluice serve models/tiny-next` and sends response_format json_schema requests through the
// official `openai` client at temperature 1 with several seeds. The tiny model's text is arbitrary;
// only the grammar makes a reply valid, which is what this suite shows: every reply that ends with
// "stop" must JSON.parse and validate under ajv + ajv-formats (draft 2020-12, or draft-07 for the
// draft-7 tuple form), and each schema must get enough such replies (one cut by max_tokens is a
// prefix and proves nothing). The zod schemas are made by zod itself (z.toJSONSchema, zod 4); the
// pydantic ones are written as pydantic 2's model_json_schema() emits them. Every string carries a
// bound (zod .max(), pydantic max_length, or a format of bounded length): a random model does not
// end an unbounded string within the token budget. Tool-call arguments under tool_choice "required"
// are checked the same way. Schemas outside the supported subset — zod's hostname (a lookahead in
// its pattern), a backreference, a decimal multipleOf, a hostile repetition — are 400
// unsupported_schema naming the keyword and its place, answered at once.
// Prints "N passed, M failed"; exits 1 on failure.
import path from "node:path";
import Ajv from "ajv";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";
import OpenAI from "openai";
import { z } from "zod";
import { startServe, suite } from "./serve_util.mjs";

const bin = process.env.SLUICE_BIN;
const src = process.env.SLUICE_SOURCE_DIR;
if (!bin || !src) {
    console.error("[json_schema] SLUICE_BIN and SLUICE_SOURCE_DIR must be set");
    process.exit(2);
}
const modelDir = path.join(src, "models", "tiny-next");
const SEEDS = [1, 2, 3, 4, 5, 6];
const MIN_FINISHED = 3; // replies per schema that must end with "stop" (and so be checked whole)

const { check, test, finish } = suite("json_schema");

// ---- the corpus ----

const zod = (schema) => z.toJSONSchema(schema);
const corpus = [
    {
        name: "zod: object of formats, regex, multipleOf, tuple, record",
        schema: zod(z.object({
            email: z.email().max(40),
            id: z.uuid(),
            createdAt: z.iso.datetime(),
            site: z.url().max(40),
            code: z.string().regex(/^[A-Z]{3}-\d{4}$/),
            qty: z.number().int().min(0).max(100).multipleOf(5),
            point: z.tuple([z.number().int(), z.string().max(8)]),
            tags: z.record(z.string().regex(/^k_\d+$/).max(6), z.boolean()),
            nickname: z.string().max(12).optional(),
        })),
    },
    {
        name: "zod: network and calendar formats",
        schema: zod(z.object({ v4: z.ipv4(), v6: z.ipv6(), day: z.iso.date(), at: z.iso.time({ precision: 0 }),
            stamp: z.iso.datetime({ precision: 3 }), token: z.uuidv4() })),
    },
    { name: "zod: z.record(z.enum(...), ...)", schema: zod(z.record(z.enum(["read", "write", "admin"]), z.boolean())) },
    { name: "zod: z.tuple(..., rest)", schema: zod(z.tuple([z.string().max(10), z.number()], z.boolean())) },
    { name: "zod: catchall with multipleOf", schema: zod(z.object({ name: z.string().max(10) }).catchall(z.number().int().multipleOf(3))) },
    {
        name: "zod: discriminated union",
        schema: zod(z.discriminatedUnion("kind", [z.object({ kind: z.literal("a"), n: z.number().int().multipleOf(7) }),
            z.object({ kind: z.literal("b"), s: z.string().regex(/^[a-z]+$/).max(6) })])),
    },
    {
        // class Order(BaseModel) with EmailStr, AnyUrl, UUID, datetime, constr(pattern=...),
        // conlist(int, min_length=1, max_length=3), Dict[constr(max_length=8), int] (max_length=3),
        // Tuple[int, constr(max_length=8)], conint(multiple_of=5), IPv4Address, an Enum, a nested
        // model and Optional[constr(max_length=20)] = None.
        name: "pydantic: Order",
        maxTokens: 900,
        schema: {
            $defs: {
                Address: { properties: { city: { maxLength: 20, title: "City", type: "string" }, zip: { pattern: "^\\d{5}$", title: "Zip", type: "string" } },
                    required: ["city", "zip"], title: "Address", type: "object" },
                Status: { enum: ["new", "paid", "shipped"], title: "Status", type: "string" },
            },
            properties: {
                id: { format: "uuid", title: "Id", type: "string" },
                email: { format: "email", maxLength: 40, title: "Email", type: "string" },
                homepage: { format: "uri", maxLength: 60, minLength: 1, title: "Homepage", type: "string" },
                created: { format: "date-time", title: "Created", type: "string" },
                sku: { pattern: "^[A-Z]{3}-\\d{4}$", title: "Sku", type: "string" },
                scores: { items: { type: "integer" }, maxItems: 3, minItems: 1, title: "Scores", type: "array" },
                stock: { additionalProperties: { type: "integer" }, maxProperties: 3, propertyNames: { maxLength: 8 }, title: "Stock", type: "object" },
                dims: { maxItems: 2, minItems: 2, prefixItems: [{ type: "integer" }, { maxLength: 8, type: "string" }], title: "Dims", type: "array" },
                batch: { multipleOf: 5, title: "Batch", type: "integer" },
                ip: { format: "ipv4", title: "Ip", type: "string" },
                status: { $ref: "#/$defs/Status" },
                address: { $ref: "#/$defs/Address" },
                note: { anyOf: [{ maxLength: 20, type: "string" }, { type: "null" }], default: null, title: "Note" },
            },
            required: ["id", "email", "homepage", "created", "sku", "scores", "stock", "dims", "batch", "ip", "status", "address"],
            title: "Order",
            type: "object",
        },
    },
    {
        // Dict[constr(pattern=r"^[a-z]{2}$"), conint(ge=0, le=500, multiple_of=10)] with min_length=1.
        name: "pydantic: Dict with pattern keys",
        schema: { additionalProperties: { maximum: 500, minimum: 0, multipleOf: 10, type: "integer" }, minProperties: 1, maxProperties: 4,
            propertyNames: { pattern: "^[a-z]{2}$" }, title: "Prices", type: "object" },
    },
    {
        name: "draft-07: items array and additionalItems (zod-to-json-schema's tuples)",
        draft7: true,
        schema: { $schema: "http://json-schema.org/draft-07/schema#", type: "object",
            properties: { pair: { type: "array", minItems: 2, maxItems: 2, items: [{ type: "number" }, { type: "string", maxLength: 8 }] },
                rest: { type: "array", items: [{ type: "integer" }], additionalItems: { type: "boolean" }, maxItems: 4 } },
            required: ["pair", "rest"], additionalProperties: false },
    },
    {
        name: "patternProperties beside properties",
        schema: { type: "object", properties: { name: { type: "string", maxLength: 8 } }, required: ["name"],
            patternProperties: { "^x-": { type: "integer" }, "^n_\\d$": { type: "null" } }, propertyNames: { maxLength: 6 }, additionalProperties: false },
    },
    ...["date", "time", "date-time", "uuid", "ipv4", "ipv6", "hostname"].map((f) => ({ name: `format ${f}`, schema: { type: "string", format: f } })),
    { name: "format email (bounded)", schema: { type: "string", format: "email", maxLength: 30 } },
    { name: "format uri (bounded)", schema: { type: "string", format: "uri", maxLength: 30 } },
    { name: "pattern, unanchored", schema: { type: "string", pattern: "ab+c", maxLength: 12 } },
];

function validator(entry) {
    const ajv = entry.draft7 ? new Ajv({ strict: false, allErrors: true }) : new Ajv2020({ strict: false, allErrors: true });
    addFormats(ajv);
    return ajv.compile(entry.schema);
}

// The Order tool's schema takes ~800 prompt tokens in the chat template.
const server = await startServe(bin, [modelDir, "--ctx-size", "2048", "--parallel", "2"]);
const watchdog = setTimeout(() => {
    console.log("FAIL watchdog: the suite took longer than 300 s");
    server.kill();
    process.exit(1);
}, 300000);

try {
    await server.ready();
    const client = new OpenAI({ baseURL: `http://127.0.0.1:${server.port}/v1`, apiKey: "unused", maxRetries: 0, timeout: 60000 });
    const messages = [{ role: "user", content: "Answer with JSON." }];

    for (const entry of corpus) {
        await test(entry.name, async () => {
            const validate = validator(entry);
            const replies = await Promise.all(SEEDS.map(async (seed) => {
                const r = await client.chat.completions.create({ model: "tiny-next", messages, temperature: 1, seed,
                    max_tokens: entry.maxTokens ?? 300, response_format: { type: "json_schema", json_schema: { name: "answer", schema: entry.schema, strict: false } } });
                return { seed, finish: r.choices[0].finish_reason, text: r.choices[0].message.content };
            }));
            let finished = 0;
            for (const { seed, finish: reason, text } of replies) {
                if (reason !== "stop") continue;
                ++finished;
                let value;
                try {
                    value = JSON.parse(text);
                } catch (e) {
                    check(`${entry.name}: seed ${seed} parses`, false, `${e.message}: ${text}`);
                    continue;
                }
                check(`${entry.name}: seed ${seed} validates`, validate(value), `${text} ${JSON.stringify(validate.errors)}`);
            }
            check(`${entry.name}: ${MIN_FINISHED}+ of ${SEEDS.length} replies end with stop`, finished >= MIN_FINISHED,
                replies.map((r) => `${r.finish}: ${r.text.slice(0, 80)}`).join(" | "));
        });
    }

    await test("tool arguments", async () => {
        const parameters = corpus.find((e) => e.name === "pydantic: Order").schema;
        const validate = validator({ schema: parameters });
        let finished = 0;
        for (const seed of SEEDS) {
            const r = await client.chat.completions.create({ model: "tiny-next", messages, temperature: 1, seed, max_tokens: 900,
                tool_choice: "required", parallel_tool_calls: false,
                tools: [{ type: "function", function: { name: "place_order", description: "Place an order", parameters } }] });
            const calls = r.choices[0].message.tool_calls ?? [];
            if (r.choices[0].finish_reason !== "tool_calls") continue;
            ++finished;
            const args = JSON.parse(calls[0].function.arguments);
            check(`tool arguments: seed ${seed} validate`, calls.length === 1 && validate(args), `${calls[0].function.arguments} ${JSON.stringify(validate.errors)}`);
        }
        check(`tool arguments: ${MIN_FINISHED}+ complete calls`, finished >= MIN_FINISHED, String(finished));
    });

    const refused = async (name, schema, messageHas) => {
        await test(name, async () => {
            const t0 = performance.now();
            try {
                await client.chat.completions.create({ model: "tiny-next", messages, max_tokens: 2,
                    response_format: { type: "json_schema", json_schema: { name: "x", schema } } });
                check(name, false, "no error");
            } catch (e) {
                const ms = performance.now() - t0;
                check(name, e instanceof OpenAI.APIError && e.status === 400 && e.code === "unsupported_schema" &&
                    e.param === "response_format.json_schema.schema" && messageHas.every((s) => String(e.message).includes(s)),
                    `status ${e.status} code ${e.code} param ${e.param}: ${e.message}`);
                check(`${name}: answered in under 2 s`, ms < 2000, `${ms.toFixed(0)} ms`);
            }
        });
    };
    await refused("refused: zod's hostname (lookahead)", zod(z.object({ host: z.hostname() })), ["'pattern'", "lookahead", "#/properties/host"]);
    await refused("refused: backreference", { type: "string", pattern: "^(a)\\1$" }, ["'pattern'", "backreference"]);
    await refused("refused: decimal multipleOf (pydantic confloat(multiple_of=0.01))", { multipleOf: 0.01, type: "number" }, ["'multipleOf'"]);
    await refused("refused: a{1000000}", { type: "object", properties: { a: { type: "string", pattern: "a{1000000}" } } },
        ["'pattern'", "#/properties/a", "16384 states"]);
    await refused("refused: (a|b)*a(a|b){30}", { type: "string", pattern: "(a|b)*a(a|b){30}" }, ["'pattern'", "16384 states"]);
    await refused("refused: unknown format", { type: "string", format: "credit-card" }, ["'format'", "credit-card"]);
} catch (e) {
    check("suite", false, String(e && e.stack));
} finally {
    clearTimeout(watchdog);
    server.kill();
}
finish();
