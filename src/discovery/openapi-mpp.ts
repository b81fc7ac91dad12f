// The MPP discovery extension (mpp-specs, draft-payment-discovery-00): an OpenAPI 3.1 document at
// GET /openapi.json whose payable operations carry `x-payment-info` (the multi-offer form: one `offers`
// array) and a 402 response. One operation per listed endpoint that takes MPP, at its metered path; an MCP
// endpoint is one POST whose tools are priced apart (amount null: the tool's 402 says its price). The
// document is advisory: the 402's challenge is authoritative.
import type { StoredDiscovery } from './listing.ts'

const BODY_METHODS = new Set(['POST', 'PUT', 'PATCH'])

/** One offer of an operation, as `x-payment-info` lists it (amount null: it depends on the request). */
export interface PaymentOffer {
  intent: string
  method: string
  amount: string | null
  currency: string
  description?: string
}

/** A listed endpoint as one payable operation. */
export interface PayableOperation {
  /** The path after the server URL (`/m/<id>`). */
  path: string
  /** GET, POST, … (upper case). */
  method: string
  summary: string
  offers: PaymentOffer[]
  discovery: StoredDiscovery | null
  /** An MCP endpoint: a JSON-RPC POST. */
  mcp: boolean
}

export interface OpenApiInput {
  title: string
  /** The server URL the paths are under (the public URL). */
  serverUrl: string
  operations: PayableOperation[]
}

/** The discovery document: OpenAPI 3.1.0, `x-payment-info` and a 402 response on every payable operation. */
export function mppOpenApi(input: OpenApiInput): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {}
  for (const op of input.operations) {
    paths[op.path] ??= {}
    paths[op.path]![op.method.toLowerCase()] = operation(op)
  }
  return {
    openapi: '3.1.0',
    info: { title: input.title, version: '1.0.0' },
    servers: [{ url: input.serverUrl }],
    paths,
  }
}

function operation(op: PayableOperation): Record<string, unknown> {
  const out: Record<string, unknown> = {
    summary: op.summary,
    'x-payment-info': { offers: op.offers },
    ...input(op),
    responses: {
      '200': response(op.discovery),
      '402': { description: 'Payment Required (WWW-Authenticate: Payment, and x402 PAYMENT-REQUIRED)' },
    },
  }
  return out
}

/** What the operation takes: a JSON-RPC body for MCP, else the owner's declared input schema. */
function input(op: PayableOperation): Record<string, unknown> {
  if (op.mcp) return { requestBody: jsonBody(JSON_RPC_REQUEST) }
  const schema = op.discovery?.input_schema
  if (schema === undefined) return {}
  if (BODY_METHODS.has(op.method)) {
    const type = op.discovery?.body_type ?? 'json'
    const mime =
      type === 'form-data' ? 'multipart/form-data' : type === 'text' ? 'text/plain' : 'application/json'
    return { requestBody: { required: true, content: { [mime]: { schema } } } }
  }
  // A query method: the schema's properties as query parameters.
  const properties = (schema.properties ?? {}) as Record<string, unknown>
  const required = new Set(Array.isArray(schema.required) ? (schema.required as string[]) : [])
  return {
    parameters: Object.entries(properties).map(([name, s]) => ({
      name,
      in: 'query',
      required: required.has(name),
      schema: s,
    })),
  }
}

function response(d: StoredDiscovery | null): Record<string, unknown> {
  if (d?.output_schema === undefined && d?.output_example === undefined)
    return { description: 'Successful response' }
  const media: Record<string, unknown> = {}
  if (d.output_schema !== undefined) media.schema = d.output_schema
  if (d.output_example !== undefined) media.example = d.output_example
  return { description: 'Successful response', content: { 'application/json': media } }
}

function jsonBody(schema: Record<string, unknown>): Record<string, unknown> {
  return { required: true, content: { 'application/json': { schema } } }
}

const JSON_RPC_REQUEST = {
  type: 'object',
  properties: {
    jsonrpc: { const: '2.0' },
    id: { type: ['string', 'integer'] },
    method: { type: 'string' },
    params: { type: 'object' },
  },
  required: ['jsonrpc', 'method'],
}
