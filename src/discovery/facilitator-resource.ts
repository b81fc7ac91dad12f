// What a payment settled through the facilitator tells a catalog: a v2 payload carrying the x402 `bazaar`
// extension names its resource (`paymentPayload.resource`) and how to call it (`extensions.bazaar.info`), as
// the CDP facilitator's catalog reads it (@x402/extensions' extractDiscoveryInfo). Checked as the published
// spec check (validateDiscoveryExtensionSpec) checks it; the service metadata kept only where it passes the
// limits the listing's own endpoints are held to. A v1 payment has no resource object and no extension: its
// requirements name the resource, and their `outputSchema` (input type http, a method, `discoverable` not
// false) says how to call it, read field for field as the published extractDiscoveryInfoV1 reads it, and
// cataloged under the extension that function builds for it. Anything else: not listed (the payment settles
// regardless).
import { hasExternalRef, isPublicIconUrl } from './listing.ts'

export interface FacilitatorResource {
  url: string
  type: 'http' | 'mcp'
  /** The protocol version of the payment that described it (its terms are in that version's shape). */
  x402Version: 1 | 2
  /** The terms the payload accepted (the 402's requirements): what the listing offers. */
  accepted: Record<string, unknown>
  /** The extension as a catalog echoes it: {bazaar: {info, schema}}. */
  extensions: { bazaar: Record<string, unknown> }
  description: string | null
  mimeType: string | null
  serviceName: string | null
  tags: string[] | null
  iconUrl: string | null
  priceAtomic: bigint
}

const HTTP_METHODS = ['GET', 'HEAD', 'DELETE', 'POST', 'PUT', 'PATCH']
const BODY_METHODS = ['POST', 'PUT', 'PATCH']
const BODY_TYPES = ['json', 'form-data', 'text']
/** A catalog keeps an extension this size at most (the listing's schema limit, twice: info and schema). */
const MAX_EXTENSION_BYTES = 32_768
const MAX_URL = 2048
const PRINTABLE = /^[\x20-\x7e]{1,32}$/

const isObject = (o: unknown): o is Record<string, unknown> =>
  typeof o === 'object' && o !== null && !Array.isArray(o)

/**
 * The resource a v2 payload's bazaar extension describes, or a v1 payment's requirements' outputSchema, or
 * null when there is none fit to list.
 */
export function facilitatorResourceOf(
  paymentPayload: unknown,
  paymentRequirements?: unknown,
): FacilitatorResource | null {
  if (!isObject(paymentPayload)) return null
  if (paymentPayload.x402Version === 1) return v1ResourceOf(paymentRequirements)
  if (paymentPayload.x402Version !== 2) return null
  const { resource, extensions, accepted } = paymentPayload
  if (!isObject(resource) || !isObject(extensions) || !isObject(accepted)) return null
  const bazaar = extensions.bazaar
  if (!isObject(bazaar) || !isObject(bazaar.info)) return null
  const type = inputType(bazaar.info)
  if (type === null || JSON.stringify(bazaar).length > MAX_EXTENSION_BYTES || hasExternalRef(bazaar.schema))
    return null
  const url = canonicalUrl(resource.url, bazaar.routeTemplate)
  const amount =
    typeof accepted.amount === 'string' && /^\d{1,30}$/.test(accepted.amount) ? accepted.amount : null
  if (url === null || amount === null) return null
  return {
    url,
    type,
    x402Version: 2,
    accepted,
    extensions: { bazaar },
    description: text(resource.description, 1024),
    mimeType: text(resource.mimeType, 128),
    serviceName:
      typeof resource.serviceName === 'string' && PRINTABLE.test(resource.serviceName)
        ? resource.serviceName
        : null,
    tags: tagsOf(resource.tags),
    iconUrl:
      typeof resource.iconUrl === 'string' && isPublicIconUrl(resource.iconUrl) ? resource.iconUrl : null,
    priceAtomic: BigInt(amount),
  }
}

/** The schema the published code gives a v1 payment's extension (buildBazaarExtensionFromDiscoveryInfo). */
const V1_SCHEMA = {
  $schema: 'https://json-schema.org/draft/2020-12/schema',
  type: 'object',
  properties: { input: { type: 'object' }, output: { type: 'object' } },
  required: ['input'],
}

/** A v1 payment's resource: its requirements' URL, terms and outputSchema (an http input with a method). */
function v1ResourceOf(requirements: unknown): FacilitatorResource | null {
  if (!isObject(requirements) || JSON.stringify(requirements).length > MAX_EXTENSION_BYTES) return null
  const info = v1DiscoveryInfo(requirements.outputSchema)
  const url = canonicalUrl(requirements.resource, undefined)
  const amount = requirements.maxAmountRequired
  if (info === null || url === null || typeof amount !== 'string' || !/^\d{1,30}$/.test(amount)) return null
  // As a v2 extension's schema: nothing the listing would have to fetch from elsewhere.
  if (hasExternalRef(info)) return null
  return {
    url,
    type: 'http',
    x402Version: 1,
    accepted: requirements,
    extensions: { bazaar: { info, schema: V1_SCHEMA } },
    description: text(requirements.description, 1024),
    mimeType: text(requirements.mimeType, 128),
    serviceName: null,
    tags: null,
    iconUrl: null,
    priceAtomic: BigInt(amount),
  }
}

/**
 * What the published extractDiscoveryInfoV1 reads from a v1 outputSchema, field for field (the spellings
 * v1 servers used: queryParams, query_params, query, params; bodyFields, body_fields, bodyParams, body, data,
 * properties): a query method's query parameters, a body method's body and body type, the headers, the
 * output as a JSON example. Null when not discoverable.
 */
function v1DiscoveryInfo(schema: unknown): Record<string, unknown> | null {
  if (!isObject(schema) || !isObject(schema.input)) return null
  const input = schema.input
  if (input.type !== 'http' || !('method' in input) || !(input.discoverable ?? true)) return null
  const method = typeof input.method === 'string' ? input.method.toUpperCase() : ''
  const objectOf = (...keys: string[]) => {
    for (const k of keys) if (isObject(input[k])) return input[k] as Record<string, unknown>
    return undefined
  }
  const queryParams = objectOf('queryParams', 'query_params', 'query', 'params')
  // The first of these set, if it is an object (as published: a set non-object one hides the others).
  const headersRaw = input.headerFields || input.header_fields || input.headers
  const headers = isObject(headersRaw) ? headersRaw : undefined
  const output = schema.output ? { output: { type: 'json', example: schema.output } } : {}
  const rest = { ...(queryParams ? { queryParams } : {}), ...(headers ? { headers } : {}) }
  if (['GET', 'HEAD', 'DELETE'].includes(method))
    return { input: { type: 'http', method, ...rest }, ...output }
  if (!BODY_METHODS.includes(method)) return null
  const bodyTypeField = input.bodyType || input.body_type
  const declared = typeof bodyTypeField === 'string' ? bodyTypeField.toLowerCase() : ''
  const bodyType =
    declared.includes('form') || declared.includes('multipart')
      ? 'form-data'
      : declared.includes('text') || declared.includes('plain')
        ? 'text'
        : 'json'
  const body = objectOf('bodyFields', 'body_fields', 'bodyParams', 'body', 'data', 'properties') ?? {}
  return { input: { type: 'http', method, bodyType, body, ...rest }, ...output }
}

/** The spec's invariants of `info.input`: http (a known method, a body type for a body method) or mcp. */
function inputType(info: Record<string, unknown>): 'http' | 'mcp' | null {
  const input = info.input
  if (!isObject(input)) return null
  if (input.type === 'mcp')
    return typeof input.toolName === 'string' && isObject(input.inputSchema) ? 'mcp' : null
  if (input.type !== 'http') return null
  if (input.method === undefined) return 'http'
  if (typeof input.method !== 'string' || !HTTP_METHODS.includes(input.method)) return null
  if (BODY_METHODS.includes(input.method) && !BODY_TYPES.includes(input.bodyType as string)) return null
  return 'http'
}

/**
 * The catalog's key, as the published extractDiscoveryInfo makes it: the origin and the extension's route
 * template when it has a valid one, else the origin and the path (a query string names a call, not the
 * resource).
 */
function canonicalUrl(raw: unknown, template: unknown): string | null {
  if (typeof raw !== 'string' || raw.length > MAX_URL || /\p{Cc}/u.test(raw)) return null
  let u: URL
  try {
    u = new URL(raw)
  } catch {
    return null
  }
  if ((u.protocol !== 'https:' && u.protocol !== 'http:') || u.username !== '' || u.password !== '')
    return null
  return `${u.origin}${validRouteTemplate(template) ?? u.pathname}`
}

/** The published check of a route template (`/users/:id`): a path, no traversal, no scheme, once decoded. */
function validRouteTemplate(t: unknown): string | null {
  if (typeof t !== 'string' || t.length > MAX_URL || !/^\/[a-zA-Z0-9_/:.\-~%]+$/.test(t)) return null
  let decoded = t
  // Decoded until it stops changing (five passes at most, else refused, as published).
  for (let i = 0; ; i++) {
    if (i === 5) return null
    let next: string
    try {
      next = decodeURIComponent(decoded)
    } catch {
      return null
    }
    if (next === decoded) break
    decoded = next
  }
  return decoded.includes('..') || decoded.includes('://') ? null : t
}

function text(raw: unknown, max: number): string | null {
  return typeof raw === 'string' && raw.length > 0 && raw.length <= max && !/\p{Cc}/u.test(raw) ? raw : null
}

function tagsOf(raw: unknown): string[] | null {
  if (!Array.isArray(raw)) return null
  const tags = raw.filter((t): t is string => typeof t === 'string' && PRINTABLE.test(t)).slice(0, 5)
  return tags.length === 0 ? null : tags
}
