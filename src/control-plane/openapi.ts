// The OpenAPI 3.1 document, assembled from each route's `doc` (its valibot body and response schemas) and
// the data-plane description in openapi-public.ts; served at GET /api/v1/openapi.json and checked in as
// docs/openapi.json (`npm run openapi`). Deterministic: the same routes give the same bytes.
import { type ConversionConfig, toJsonSchema } from '@valibot/to-json-schema'
import * as v from 'valibot'
import { ERRORS } from '../errors.ts'
import { ApiErrorBody, PageQuery } from './api-schemas.ts'
import {
  CheckoutStatus,
  DiscoveryManifest,
  DiscoveryResources,
  MppDiscoveryDocument,
  Pass,
  PaymentRequired,
  PublicErrorBody,
  publicPaths,
  Receipt,
} from './openapi-public.ts'
import type { Route } from './route.ts'
import { AccountObject } from './routes/accounts.ts'
import { CallObject } from './routes/calls.ts'
import { EndpointObject } from './routes/endpoints.ts'
import { EventObject } from './routes/events.ts'
import { PaymentObject } from './routes/payments.ts'
import { BalanceObject, PayoutObject } from './routes/payouts.ts'
import { WebhookObject } from './routes/webhooks.ts'

type Json = Record<string, unknown>

/** Named schemas: every occurrence in a route's schema becomes a $ref to components/schemas/<name>. */
const COMPONENTS: Record<string, v.GenericSchema> = {
  Account: AccountObject,
  Balance: BalanceObject,
  Endpoint: EndpointObject,
  Call: CallObject,
  Payment: PaymentObject,
  Payout: PayoutObject,
  Webhook: WebhookObject,
  Event: EventObject,
  Error: ApiErrorBody,
  PaymentRequired,
  CheckoutStatus,
  Receipt,
  Pass,
  DiscoveryResources,
  DiscoveryManifest,
  MppDiscoveryDocument,
  PublicError: PublicErrorBody,
}

const ERROR_DESCRIPTIONS: Record<number, string> = {
  400: 'invalid_json, invalid_body, invalid_parameter (param names the field) or another invalid_* code',
  401: 'missing_api_key / invalid_api_key (or, with a dashboard session cookie, invalid_session / session_expired)',
  403: 'invalid_csrf_token: a state change with a dashboard session cookie needs X-CSRF-Token',
  404: 'not_found (also for another account’s object) / route_not_found',
  409: 'idempotency_key_reused / idempotency_key_in_use / invalid_state',
  413: 'body_too_large',
  415: 'unsupported_media_type: send JSON',
  500: 'internal_error (logged with the request id)',
}

const TAG_OF: Record<string, string> = { register: 'account', 'openapi.json': 'meta' }

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` })

function convert(schema: v.GenericSchema, definitions: Record<string, v.GenericSchema>): Json {
  const config: ConversionConfig = {
    target: 'draft-2020-12',
    // A body is described as it is sent (before trim); checks that JSON Schema cannot express are only
    // enforced by the service (and named in the 400 it answers).
    typeMode: 'input',
    errorMode: 'throw',
    ignoreActions: ['check', 'trim'],
    definitions,
    overrideRef: ({ referenceId }) => `#/components/schemas/${referenceId}`,
  }
  const { $schema: _drop, $defs: _defs, ...json } = toJsonSchema(schema, config) as Json
  return json
}

function unwrapOptional(schema: v.GenericSchema): v.GenericSchema {
  return schema.type === 'optional' ? (schema as unknown as { wrapped: v.GenericSchema }).wrapped : schema
}

function operationId(route: Route): string {
  const words = route.path
    .split('/')
    .filter(Boolean)
    .map((s) => (s.startsWith(':') ? 'ById' : s))
    .flatMap((s) => s.split(/[-_.]/))
  return route.method.toLowerCase() + words.map((w) => w[0]!.toUpperCase() + w.slice(1)).join('')
}

function operation(route: Route): Json {
  const { doc } = route
  const pathParams = [...route.path.matchAll(/:([a-z_]+)/g)].map((m) => ({
    name: m[1],
    in: 'path',
    required: true,
    schema: { type: 'string' },
  }))
  const queryEntries = { ...(doc.list ? PageQuery.entries : {}), ...doc.query }
  const queryParams = Object.entries(queryEntries).map(([name, schema]) => ({
    name,
    in: 'query',
    required: false,
    schema: convert(unwrapOptional(schema as v.GenericSchema), COMPONENTS),
  }))
  const parameters = [
    ...pathParams,
    ...queryParams,
    ...(route.idempotent ? [{ $ref: '#/components/parameters/IdempotencyKey' }] : []),
  ]
  const errors = new Set<number>([500, ...(doc.errors ?? [])])
  if (doc.body || doc.list || doc.query) errors.add(400)
  if (doc.body) errors.add(413).add(415)
  if (route.auth) errors.add(401)
  if (route.auth && route.method !== 'GET') errors.add(403)
  if (pathParams.length > 0) errors.add(404)
  if (route.idempotent) errors.add(409)
  const responses: Json = {
    [doc.response.status]: {
      description: doc.response.description ?? doc.summary,
      headers: { 'x-request-id': { $ref: '#/components/headers/RequestId' } },
      content: { 'application/json': { schema: convert(doc.response.schema, COMPONENTS) } },
    },
  }
  for (const status of [...errors].sort())
    responses[status] = { $ref: `#/components/responses/Error${status}` }
  return {
    operationId: operationId(route),
    tags: [TAG_OF[route.path.split('/')[1]!] ?? route.path.split('/')[1]!],
    summary: doc.summary,
    ...(doc.description ? { description: doc.description } : {}),
    ...(route.auth ? {} : { security: [] }),
    ...(parameters.length > 0 ? { parameters } : {}),
    ...(doc.body
      ? {
          requestBody: {
            required: !doc.bodyOptional,
            content: { 'application/json': { schema: convert(unwrapOptional(doc.body), COMPONENTS) } },
          },
        }
      : {}),
    responses,
  }
}

export function buildOpenApiDocument(routes: readonly Route[]): Json {
  const paths: Record<string, Json> = {}
  for (const route of routes) {
    const path = `/api/v1${route.path.replace(/:([a-z_]+)/g, '{$1}')}`
    paths[path] ??= {}
    paths[path][route.method.toLowerCase()] = operation(route)
  }
  Object.assign(paths, publicPaths(ref))
  const schemas: Json = {}
  for (const [name, schema] of Object.entries(COMPONENTS)) {
    // A component is itself, not a $ref to itself: convert it without its own name among the definitions.
    const { [name]: _self, ...rest } = COMPONENTS
    schemas[name] = convert(schema, rest)
  }
  const errorResponses: Json = {}
  for (const [status, description] of Object.entries(ERROR_DESCRIPTIONS)) {
    errorResponses[`Error${status}`] = {
      description,
      headers: { 'x-request-id': { $ref: '#/components/headers/RequestId' } },
      content: { 'application/json': { schema: ref('Error') } },
    }
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'tollgate',
      version: '1',
      summary: 'Payment service and pay-per-call reverse proxy for USDC (HTTP 402 / x402)',
      description:
        'Management API under /api/v1 (Bearer API key), metered calls under /m/{endpoint_id} and the hosted ' +
        'checkout under /pay/{payment_id}. Amounts: dollars as JSON numbers (`amount`, `price`) and USDC base ' +
        'units as strings (`*_atomic`). Error codes: ' +
        Object.keys(ERRORS).join(', '),
      license: { name: 'MIT', identifier: 'MIT' },
    },
    servers: [{ url: 'http://127.0.0.1:8080', description: '`npm start` on its defaults' }],
    security: [{ bearer: [] }],
    tags: [
      'account',
      'endpoints',
      'calls',
      'payments',
      'payouts',
      'webhooks',
      'events',
      'reports',
      'dashboard',
      'metered',
      'checkout',
      'meta',
    ].map((name) => ({ name })),
    paths,
    components: {
      securitySchemes: {
        bearer: { type: 'http', scheme: 'bearer', description: 'an API key, sk_test_… or sk_live_…' },
      },
      parameters: {
        IdempotencyKey: {
          name: 'Idempotency-Key',
          in: 'header',
          required: false,
          description:
            'replays the first answer for 24 h; the same key with another body is 409 idempotency_key_reused',
          schema: { type: 'string', minLength: 1, maxLength: 255 },
        },
      },
      headers: {
        RequestId: {
          description: 'the id of this request (also in error bodies as request_id)',
          schema: { type: 'string' },
        },
      },
      responses: errorResponses,
      schemas,
    },
  }
}

/** GET /api/v1/openapi.json: no key needed; built once, on first request. */
export function openApiRoute(routes: () => readonly Route[]): Route {
  let cached: Json | null = null
  return {
    method: 'GET',
    path: '/openapi.json',
    auth: false,
    doc: {
      summary: 'This document',
      response: { status: 200, schema: v.looseObject({ openapi: v.literal('3.1.0') }) },
    },
    async handler() {
      cached ??= buildOpenApiDocument(routes())
      return { status: 200, body: cached }
    },
  }
}
