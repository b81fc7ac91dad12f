// What an owner declares about an endpoint for discovery (service name, tags, icon, how to call it), checked
// once at the API boundary, and the x402 `bazaar` extension and resource metadata built from it.
import * as v from 'valibot'

/** As stored in endpoints.discovery (snake_case, the API's own words). */
export interface StoredDiscovery {
  service_name?: string
  tags?: string[]
  icon_url?: string
  method?: string
  body_type?: 'json' | 'form-data' | 'text'
  input_schema?: Record<string, unknown>
  input_example?: Record<string, unknown>
  output_schema?: Record<string, unknown>
  output_example?: Record<string, unknown>
}

const QUERY_METHODS = ['GET', 'HEAD', 'DELETE'] as const
const BODY_METHODS = ['POST', 'PUT', 'PATCH'] as const
// The limits the published bazaar code applies when it reads resource metadata: a value over them would be
// dropped silently by a catalog, so it is refused here with a reason instead.
const PRINTABLE_ASCII = /^[\x20-\x7e]+$/
const MAX_SCHEMA_BYTES = 16_384

const Printable = (max: number) =>
  v.pipe(
    v.string('must be a string'),
    v.minLength(1, 'must not be empty'),
    v.maxLength(max, `must be at most ${max} characters`),
    v.regex(PRINTABLE_ASCII, 'must be printable ASCII'),
  )

// v.record would take an array for an object (its indexes as keys), so objects are checked by hand; the
// API description shows them as any JSON (what JSON Schema cannot express is named in the 400).
const isPlainObject = (o: unknown): o is Record<string, unknown> =>
  typeof o === 'object' && o !== null && !Array.isArray(o)

const JsonObject = (what: string) =>
  v.pipe(
    v.unknown(),
    v.check(isPlainObject, `must be a JSON object (${what})`),
    v.check((o) => JSON.stringify(o).length <= MAX_SCHEMA_BYTES, `must be at most ${MAX_SCHEMA_BYTES} bytes`),
  )

const Schema = (what: string) =>
  v.pipe(
    JsonObject(what),
    v.check(
      (o) =>
        (o as Record<string, unknown>).type === undefined || (o as Record<string, unknown>).type === 'object',
      'must describe an object (type "object")',
    ),
    // A catalog must not fetch anything to read a schema (the published validator refuses these too).
    v.check((o) => !hasExternalRef(o), 'must not contain $ref or $id pointing outside the schema'),
  )

export const DiscoveryInput = v.pipe(
  v.strictObject({
    service_name: v.optional(Printable(32)),
    tags: v.optional(
      v.pipe(
        v.array(Printable(32), 'must be an array of strings'),
        v.maxLength(5, 'must hold at most 5 tags'),
        v.check(
          (t) => new Set(t.map((x) => x.toLowerCase())).size === t.length,
          'must not repeat a tag (compared case-insensitively)',
        ),
      ),
    ),
    icon_url: v.optional(
      v.pipe(
        v.string('must be a string'),
        v.maxLength(2048, 'must be at most 2048 characters'),
        v.check(isPublicIconUrl, 'must be an http(s) URL on a named public host, without credentials'),
      ),
    ),
    method: v.optional(
      v.picklist([...QUERY_METHODS, ...BODY_METHODS], 'must be one of GET, HEAD, DELETE, POST, PUT, PATCH'),
    ),
    body_type: v.optional(v.picklist(['json', 'form-data', 'text'], 'must be "json", "form-data" or "text"')),
    input_schema: v.optional(Schema('a JSON Schema of the query parameters or the body')),
    input_example: v.optional(JsonObject('an example of the query parameters or the body')),
    output_schema: v.optional(Schema('a JSON Schema of the answer')),
    // The bazaar schema declares the example answer an object: a catalog refuses anything else.
    output_example: v.optional(JsonObject('an example answer')),
  }),
  v.check(
    (d) => d.body_type === undefined || (BODY_METHODS as readonly string[]).includes(d.method ?? ''),
    'body_type goes with method POST, PUT or PATCH',
  ),
  v.check(
    (d) => !(BODY_METHODS as readonly string[]).includes(d.method ?? '') || d.input_example !== undefined,
    'a body method (POST, PUT, PATCH) needs input_example: an example body that satisfies input_schema',
  ),
)
export type DiscoveryInput = v.InferOutput<typeof DiscoveryInput>

export function hasExternalRef(node: unknown): boolean {
  if (Array.isArray(node)) return node.some(hasExternalRef)
  if (node === null || typeof node !== 'object') return false
  for (const [k, val] of Object.entries(node)) {
    if ((k === '$ref' || k === '$id') && (typeof val !== 'string' || !val.startsWith('#'))) return true
    if (hasExternalRef(val)) return true
  }
  return false
}

export function isPublicIconUrl(raw: string): boolean {
  if (/\p{Cc}/u.test(raw)) return false
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    return false
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') return false
  if (url.username !== '' || url.password !== '') return false
  const host = url.hostname.toLowerCase()
  if (host === '' || host.startsWith('[') || host === 'localhost' || host.endsWith('.localhost')) return false
  // IP literals (decimal, dotted, hex) are refused: an icon names a host.
  return !/^[\d.]+$/.test(host) && !/^0x[0-9a-f]+$/.test(host)
}

/** The x402 v2 `resource` additions a catalog reads (serviceName, tags, iconUrl), omitted when absent. */
export function resourceMetadata(d: StoredDiscovery | null): Record<string, unknown> {
  if (d === null) return {}
  const out: Record<string, unknown> = {}
  if (d.service_name !== undefined) out.serviceName = d.service_name
  if (d.tags !== undefined && d.tags.length > 0) out.tags = d.tags
  if (d.icon_url !== undefined) out.iconUrl = d.icon_url
  return out
}

/**
 * The `bazaar` extension ({info, schema}) as the published declareDiscoveryExtension shapes it: `info` is
 * what a catalog shows (method, example input, example output), `schema` a JSON Schema that `info` satisfies,
 * with the owner's input schema in place of the query parameters or body and their output schema under
 * output.example.
 */
export function bazaarExtension(d: StoredDiscovery | null): Record<string, unknown> {
  const method = d?.method ?? 'GET'
  const isBody = (BODY_METHODS as readonly string[]).includes(method)
  const inputSchema = d?.input_schema ?? { properties: {} }
  const input: Record<string, unknown> = { type: 'http', method }
  const inputProps: Record<string, unknown> = {
    type: { type: 'string', const: 'http' },
    method: { type: 'string', enum: isBody ? [...BODY_METHODS] : [...QUERY_METHODS] },
  }
  const required = ['type', 'method']
  if (isBody) {
    input.bodyType = d?.body_type ?? 'json'
    input.body = d?.input_example ?? {}
    inputProps.bodyType = { type: 'string', enum: ['json', 'form-data', 'text'] }
    inputProps.body = inputSchema
    required.push('bodyType', 'body')
  } else {
    if (d?.input_example !== undefined) input.queryParams = d.input_example
    inputProps.queryParams = { type: 'object', ...inputSchema }
  }
  const info: Record<string, unknown> = { input }
  const schemaProps: Record<string, unknown> = {
    input: { type: 'object', properties: inputProps, required, additionalProperties: false },
  }
  if (d?.output_schema !== undefined || d?.output_example !== undefined) {
    info.output =
      d.output_example === undefined ? { type: 'json' } : { type: 'json', example: d.output_example }
    schemaProps.output = {
      type: 'object',
      properties: { type: { type: 'string' }, example: { type: 'object', ...(d.output_schema ?? {}) } },
      required: ['type'],
    }
  }
  return {
    info,
    schema: {
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      type: 'object',
      properties: schemaProps,
      required: ['input'],
    },
  }
}

/** The invocation contract lifted out of the bazaar envelope, as /.well-known/x402.json carries it. */
export function manifestInput(d: StoredDiscovery | null): Record<string, unknown> {
  const method = d?.method ?? 'GET'
  const out: Record<string, unknown> = { method }
  if (d?.input_schema === undefined) return out
  if ((BODY_METHODS as readonly string[]).includes(method)) {
    out.bodyType = d.body_type ?? 'json'
    out.body = d.input_schema
  } else out.queryParams = d.input_schema
  return out
}

export function manifestOutput(d: StoredDiscovery | null): Record<string, unknown> | undefined {
  if (d === null || (d.output_schema === undefined && d.output_example === undefined)) return undefined
  const out: Record<string, unknown> = { mimeType: 'application/json' }
  if (d.output_schema !== undefined) out.schema = d.output_schema
  if (d.output_example !== undefined) out.example = d.output_example
  return out
}
