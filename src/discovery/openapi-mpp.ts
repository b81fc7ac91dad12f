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

/** Registries should keep a service to at most this many categories (the draft's registry guidance). */
const MAX_CATEGORIES = 5

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
    'x-service-info': serviceInfo(input),
    servers: [{ url: input.serverUrl }],
    paths,
  }
}

/**
 * `x-service-info`: the categories (the listed endpoints' own tags, the most used first, lowercase with
 * hyphens as the draft recommends, at most five) and the documentation this host serves for agents:
 * `/llms.txt` (llmstxt.org), the same operations in Markdown.
 */
function serviceInfo(input: OpenApiInput): Record<string, unknown> {
  const counts = new Map<string, number>()
  for (const op of input.operations) {
    for (const tag of new Set((op.discovery?.tags ?? []).map(category))) {
      if (tag !== '') counts.set(tag, (counts.get(tag) ?? 0) + 1)
    }
  }
  const categories = [...counts]
    .sort((x, y) => y[1] - x[1] || (x[0] < y[0] ? -1 : 1))
    .slice(0, MAX_CATEGORIES)
    .map(([tag]) => tag)
  return {
    ...(categories.length > 0 ? { categories } : {}),
    docs: { llms: `${input.serverUrl.replace(/\/$/, '')}/llms.txt` },
  }
}

/**
 * GET /llms.txt (llmstxt.org): the payable operations for a language model, in Markdown: a title, a summary,
 * one line per operation (method, URL, price in base units), and where the machine-readable documents are.
 */
export function llmsTxt(input: OpenApiInput): string {
  const base = input.serverUrl.replace(/\/$/, '')
  const lines = [
    `# ${oneLine(input.title)}`,
    '',
    '> Pay-per-call APIs. Every URL answers an unpaid request with HTTP 402 carrying two equivalent offers: an MPP',
    '> challenge (`WWW-Authenticate: Payment`, method `evm`, intent `charge`) and x402 terms (`PAYMENT-REQUIRED`).',
    '> Pay either one and send the request again; the 402 is authoritative, this list is advisory.',
    '',
    '## APIs',
    '',
  ]
  for (const op of input.operations) {
    const offer = op.offers[0]
    const price =
      offer === undefined
        ? ''
        : offer.amount === null
          ? ` (price: see the 402${offer.description ? `; ${oneLine(offer.description)}` : ''})`
          : ` (${offer.amount} base units of ${offer.currency}${offer.description ? `; ${oneLine(offer.description)}` : ''})`
    lines.push(
      `- [${oneLine(op.summary)}](${base}${op.path}): ${op.method}${op.mcp ? ' JSON-RPC (MCP)' : ''}${price}`,
    )
  }
  if (input.operations.length === 0) lines.push('- none listed yet')
  lines.push(
    '',
    '## Discovery',
    '',
    `- [OpenAPI with x-payment-info](${base}/openapi.json): MPP's discovery document, with input schemas`,
    `- [x402 manifest](${base}/.well-known/x402.json): the same endpoints in x402's terms`,
    '',
  )
  return lines.join('\n')
}

/** Owner text on one Markdown line (no line breaks, no link brackets). */
function oneLine(text: string): string {
  return text.replace(/[\r\n]+/g, ' ').replace(/[[\]]/g, '')
}

function category(tag: string): string {
  return tag
    .trim()
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '')
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
