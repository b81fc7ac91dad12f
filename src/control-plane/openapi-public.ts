// The wire format of the public data-plane routes (/m/* metered calls, /pay/* checkout) for the OpenAPI
// document. The control plane may not import the data plane, so their answers are described here, and the
// contract test (test/control-plane/openapi.test.ts) holds both to this description with real responses.

import * as v from 'valibot'
import { PAYMENT_REQUIRED_REASONS } from '../errors.ts'
import {
  Address,
  Atomic,
  CallAgentView,
  CallUsage,
  Dollars,
  Network,
  PricingModel,
  Timestamp,
} from './api-schemas.ts'
import { PaymentObject } from './routes/payments.ts'

const _PaymentStatus = v.picklist(['pending', 'paid', 'expired', 'canceled'])

/** x402 v1 `exact` requirement, as standard x402 clients read it. */
const ExactRequirement = v.strictObject({
  scheme: v.literal('exact'),
  network: v.string(),
  maxAmountRequired: Atomic,
  resource: v.string(),
  description: v.string(),
  mimeType: v.string(),
  payTo: Address,
  maxTimeoutSeconds: v.number(),
  asset: Address,
  extra: v.strictObject({ name: v.string(), version: v.string() }),
})

export const PaymentRequired = v.pipe(
  v.strictObject({
    error: v.pipe(
      v.string(),
      v.description(`why payment is (still) required: ${Object.keys(PAYMENT_REQUIRED_REASONS).join(', ')}`),
    ),
    request_id: v.optional(v.pipe(v.string(), v.description('the x-request-id of this answer'))),
    expires_at: v.pipe(Timestamp, v.description('how long the quoted price holds')),
    price: Dollars,
    price_atomic: Atomic,
    recipient: v.pipe(Address, v.description('the treasury: pay here')),
    currency: v.literal('USDC'),
    asset: v.pipe(Address, v.description('the USDC contract')),
    network: Network,
    chain_id: v.number(),
    endpoint_id: v.optional(v.string()),
    payment_id: v.optional(v.string()),
    amount_received_atomic: v.optional(Atomic),
    payment_status: v.optional(v.string()),
    how_to_pay: v.optional(
      v.pipe(v.string(), v.description('checkout only: a plain transfer, its hash, or the x402 offer')),
    ),
    x402Version: v.optional(v.literal(1)),
    accepts: v.optional(
      v.pipe(
        v.array(ExactRequirement),
        v.description('x402 `exact` (on a checkout: for the price still due, without the figure offset)'),
      ),
    ),
    pricing: v.optional(
      v.pipe(
        v.record(v.string(), v.unknown()),
        v.description(
          'rules and usage pricing: how the price was chosen, or measured (price is then the ceiling)',
        ),
      ),
    ),
    extensions: v.optional(
      v.pipe(
        v.record(v.string(), v.unknown()),
        v.description(
          'x402 extensions: `bazaar` (how to call it) when the owner lists the endpoint; `tollgate-pass` ' +
            '(the pass it sells: price, calls, duration_s, purchase_url) when it sells one (docs/passes.md)',
        ),
      ),
    ),
    schemes_not_offered: v.optional(
      v.pipe(
        v.array(v.strictObject({ scheme: v.string(), reason: v.string() })),
        v.description('schemes tollgate has but does not offer here, and why (exact: amount_varies)'),
      ),
    ),
  }),
  v.description(
    'The 402 requirement with the x402 `accepts` (and the v2 form in the PAYMENT-REQUIRED header, base64 JSON). ' +
      'A checkout is also paid by a plain transfer of `price_atomic` or by presenting its hash.',
  ),
)

/** The checkout's view of a payment: the API object without `metadata` (private to the merchant), plus what
 * the page shows. One presenter serves both (src/checkout/presenter.ts). */
const { metadata: _merchantOnly, ...checkoutEntries } = PaymentObject.entries
export const CheckoutStatus = v.strictObject({
  ...checkoutEntries,
  business_name: v.string(),
  transaction_url: v.nullable(v.string()),
  test_mode: v.boolean(),
})

/** A paid call's public receipt (src/data-plane/receipts.ts). */
/** A pass bought at /pass/{endpoint_id}: its uses and its end, drawn on by signing in (passes.md). */
export const Pass = v.pipe(
  v.strictObject({
    object: v.literal('pass'),
    id: v.string(),
    endpoint_id: v.string(),
    metered_url: v.string(),
    payer: Address,
    price_atomic: Atomic,
    calls: v.pipe(v.nullable(v.number()), v.description('uses bought; null: unlimited until expires_at')),
    uses_left: v.pipe(v.nullable(v.number()), v.description('null: unlimited until expires_at')),
    expires_at: v.pipe(v.nullable(Timestamp), v.description('null: no time limit')),
    created_at: Timestamp,
  }),
  v.description(
    'A pass: N calls or T seconds of an endpoint, paid once, used by signing in with the paying wallet',
  ),
)

export const Receipt = v.pipe(
  v.strictObject({
    id: v.string(),
    object: v.literal('receipt'),
    status: v.literal('final'),
    call_id: v.pipe(
      v.nullable(v.string()),
      v.description('the paid call; null for a signed-in call on a pass'),
    ),
    pass: v.pipe(
      v.nullable(v.strictObject({ id: v.string(), purchase_call_id: v.string() })),
      v.description(
        'a signed-in call on a pass: the pass it used, and the purchase call whose payment (the settlement below) paid for every use; amount is then 0',
      ),
    ),
    endpoint_id: v.string(),
    payer: v.string(),
    scheme: v.nullable(v.string()),
    method: v.string(),
    upstream_status: v.number(),
    amount: Dollars,
    amount_atomic: Atomic,
    pricing_model: PricingModel,
    usage: CallUsage,
    agent: CallAgentView,
    settlement: v.pipe(
      v.strictObject({
        status: v.pipe(
          v.picklist(['pending', 'sent', 'settled', 'failed']),
          v.description(
            'pending: not sent yet (settled after the answer, in a batch); sent: a transaction carries it, not known mined; settled: used on chain; failed: expired unsent or reverted (the call stays unpaid)',
          ),
        ),
        transaction: v.pipe(
          v.nullable(v.string()),
          v.description('the transaction that carries the payment (a transaction-hash payment: its own)'),
        ),
        block_number: v.pipe(
          v.nullable(v.number()),
          v.description(
            'the block that mined it, once settled: the exact authorization’s or upto permit’s settlement, or the batch-settlement claim transaction covering the voucher (null when it was used some other way, an upto call charged 0, or a transaction-hash payment)',
          ),
        ),
        confirmations: v.pipe(
          v.nullable(v.number()),
          v.description('blocks from that block to the chain head at this read, inclusive'),
        ),
        batch: v.pipe(
          v.nullable(v.strictObject({ transaction: v.string(), index: v.number(), count: v.number() })),
          v.description(
            'the payment’s place in its transaction: index (from 0) among the count of items it carries (1: alone); items are exact authorizations, upto permits, or, for batch-settlement, channel vouchers (one per channel: every call the claim covers on a channel shows its channel’s place)',
          ),
        ),
        error: v.pipe(v.nullable(v.string()), v.description('why it failed: expired, reverted')),
      }),
      v.description('Where the payment’s settlement on chain stands at this read.'),
    ),
    created_at: Timestamp,
    delivered: v.pipe(
      v.nullable(v.strictObject({ body_sha256: v.string(), body_bytes: v.number() })),
      v.description(
        'SHA-256 (hex) and length of the body as delivered; null when it was not delivered whole, or for a few seconds after the answer ended',
      ),
    ),
    signed: v.pipe(
      v.nullable(
        v.strictObject({
          kid: v.string(),
          format: v.literal('eip712'),
          domain: v.record(v.string(), v.unknown()),
          payload: v.record(v.string(), v.unknown()),
          signature: v.string(),
        }),
      ),
      v.description(
        'EIP-712 signature over the receipt (types at /.well-known/x402-receipt-keys.json); null without a signing key',
      ),
    ),
  }),
  v.description(
    'What a paid call measured, delivered and was charged, and where its settlement stands; written when its answer ended.',
  ),
)

/** What tollgate measured of an endpoint's paid traffic (src/discovery/observed.ts). */
const Observed = v.pipe(
  v.strictObject({
    window_days: v.number(),
    paid_calls: v.number(),
    success_rate: v.pipe(v.nullable(v.number()), v.description('served (upstream below 500) / paid calls')),
    refund_rate: v.pipe(
      v.nullable(v.number()),
      v.description(
        'not served (upstream failed, timed out, client left first) / paid calls: refunded or retried free',
      ),
    ),
    p50_upstream_ms: v.pipe(
      v.nullable(v.number()),
      v.description('upper bound of the bucket holding the median'),
    ),
    p99_upstream_ms: v.nullable(v.number()),
    repeat_payers: v.pipe(v.number(), v.description('payers with 2 or more paid calls in the window')),
    by_agent: v.optional(
      v.pipe(
        v.array(
          v.strictObject({
            signer: v.pipe(
              v.string(),
              v.description('a signer the operator configured (docs/agent-identity.md), or "unsigned"'),
            ),
            paid_calls: v.number(),
            success_rate: v.nullable(v.number()),
          }),
        ),
        v.description('an endpoint with identity rules: its paid calls by who called, busiest first'),
      ),
    ),
  }),
  v.description('what paid traffic through tollgate observed, counted per hour'),
)

const ResourceMeta = {
  description: v.string(),
  mimeType: v.string(),
  serviceName: v.optional(v.string()),
  tags: v.optional(v.array(v.string())),
  iconUrl: v.optional(v.string()),
}

const ListedItem = {
  resource: v.string(),
  x402Version: v.literal(2),
  accepts: v.array(v.record(v.string(), v.unknown())),
  lastUpdated: Timestamp,
  ...ResourceMeta,
  observed: Observed,
}

/** GET /discovery/resources: the facilitator's list shape (x402 bazaar), plus `observed`. */
export const DiscoveryResources = v.strictObject({
  x402Version: v.literal(2),
  items: v.array(
    v.union([
      v.strictObject({ ...ListedItem, type: v.literal('http') }),
      v.pipe(
        v.strictObject({
          ...ListedItem,
          type: v.literal('mcp'),
          toolName: v.pipe(v.string(), v.description('the tool a `tools/call` names')),
          extensions: v.pipe(
            v.strictObject({ bazaar: v.record(v.string(), v.unknown()) }),
            v.description(
              'bazaar: the MCP tool as its 402 describes it (info.input: toolName, inputSchema, …)',
            ),
          ),
        }),
        v.description('one paid tool of a listed MCP endpoint; observed counts that tool alone'),
      ),
      v.pipe(
        v.strictObject({
          resource: v.pipe(
            v.string(),
            v.description(
              "the merchant's own URL: origin and route template (or path), as the payment named it",
            ),
          ),
          type: v.picklist(['http', 'mcp']),
          x402Version: v.pipe(
            v.picklist([1, 2]),
            v.description(
              "the version of the payment that described it: 1, its requirements' outputSchema (accepts in the v1 shape)",
            ),
          ),
          accepts: v.pipe(
            v.array(v.record(v.string(), v.unknown())),
            v.description('the terms the latest settled payment accepted'),
          ),
          lastUpdated: Timestamp,
          description: v.optional(v.string()),
          mimeType: v.optional(v.string()),
          serviceName: v.optional(v.string()),
          tags: v.optional(v.array(v.string())),
          iconUrl: v.optional(v.string()),
          extensions: v.pipe(
            v.strictObject({ bazaar: v.record(v.string(), v.unknown()) }),
            v.description(
              'bazaar: the extension the payment carried ({info, schema}), echoed; for v1, as the published code builds it from the outputSchema',
            ),
          ),
          observed: v.pipe(
            Observed,
            v.description(
              'from its settlements: paid_calls mined, success_rate 1 (the middleware settles a served call only), refund_rate 0, no latency (tollgate did not serve it)',
            ),
          ),
        }),
        v.description(
          "a resource of a merchant's own server, settled through /api/v1/facilitator with the bazaar extension, or a discoverable v1 outputSchema (after the endpoints' items)",
        ),
      ),
    ]),
  ),
  pagination: v.strictObject({ limit: v.number(), offset: v.number(), total: v.number() }),
})

/** GET /.well-known/x402.json: the x402 per-origin discovery manifest (draft). */
export const DiscoveryManifest = v.strictObject({
  x402Version: v.literal(2),
  lastUpdated: v.pipe(v.number(), v.description('unix seconds')),
  items: v.array(
    v.strictObject({
      resource: v.strictObject({ url: v.string(), ...ResourceMeta }),
      type: v.picklist(['http', 'mcp']),
      accepts: v.array(v.record(v.string(), v.unknown())),
      input: v.pipe(
        v.record(v.string(), v.unknown()),
        v.description('http: method, queryParams | bodyType + body; mcp: toolName, inputSchema, transport'),
      ),
      output: v.optional(v.record(v.string(), v.unknown())),
    }),
  ),
})

/** GET /openapi.json: MPP's discovery document (OpenAPI 3.1 with x-payment-info per payable operation). */
export const MppDiscoveryDocument = v.object({
  openapi: v.literal('3.1.0'),
  info: v.strictObject({ title: v.string(), version: v.string() }),
  'x-service-info': v.pipe(
    v.strictObject({
      categories: v.optional(v.array(v.string())),
      docs: v.strictObject({ llms: v.string() }),
    }),
    v.description(
      "categories: the listed endpoints' tags, most used first (at most 5); docs.llms: this host's /llms.txt",
    ),
  ),
  servers: v.array(v.strictObject({ url: v.string() })),
  paths: v.pipe(
    v.record(v.string(), v.record(v.string(), v.record(v.string(), v.unknown()))),
    v.description(
      "/m/<id> per listed endpoint that takes MPP: summary, x-payment-info {offers: [{intent, method, amount (base units, null: the 402 says), currency, description}]}, the endpoint's input, and a 402 response",
    ),
  ),
})

export const PublicErrorBody = v.strictObject({
  error: v.strictObject({
    type: v.string(),
    code: v.string(),
    message: v.string(),
    param: v.optional(v.pipe(v.string(), v.description('the query parameter that was refused'))),
  }),
  request_id: v.optional(v.string()),
  payment: v.optional(CheckoutStatus),
  refund: v.optional(
    v.pipe(
      v.strictObject({ status: v.literal('scheduled'), transaction: v.string() }),
      v.description('a proof the payment could not take: claimed and refunded to its sender'),
    ),
  ),
})

type Json = Record<string, unknown>

/**
 * Paths of the data plane, with schemas as $refs into components (filled by openapi.ts).
 * One piece on purpose: a declarative table of the public contract (no logic), read top to bottom like the
 * document it produces; split, its shared response shapes would have to travel between the pieces.
 */
export function publicPaths(ref: (name: string) => Json): Json {
  const json = (name: string, description: string, headers?: Json) => ({
    description,
    ...(headers ? { headers } : {}),
    content: { 'application/json': { schema: ref(name) } },
  })
  const error = (description: string) => json('PublicError', description)
  const required402 = json('PaymentRequired', 'payment required (or the proof was refused: see `error`)', {
    'PAYMENT-REQUIRED': { description: 'x402 v2 requirement, base64 JSON', schema: { type: 'string' } },
  })
  const proofHeaders = [
    {
      name: 'x-payment',
      in: 'header',
      required: false,
      description: 'a USDC transfer transaction hash, or an x402 v1 payload (base64 JSON)',
      schema: { type: 'string' },
    },
    {
      name: 'payment-signature',
      in: 'header',
      required: false,
      description: 'an x402 v2 payload (base64 JSON)',
      schema: { type: 'string' },
    },
  ]
  const endpointId = { name: 'endpoint_id', in: 'path', required: true, schema: { type: 'string' } }
  const paymentId = { name: 'payment_id', in: 'path', required: true, schema: { type: 'string' } }
  const metered = (method: string) => ({
    operationId: `${method}Metered`,
    tags: ['metered'],
    summary: `${method.toUpperCase()} through a metered endpoint (any method, any rest of path, is proxied)`,
    security: [],
    parameters: [endpointId, ...proofHeaders],
    responses: {
      '200': {
        description:
          "the upstream's answer, streamed, with a receipt (the upstream's own status: any below 500 is passed through and captured)",
        headers: {
          'x-receipt-id': {
            description: 'the receipt of this call, at /receipts/{id} once the answer ended',
            schema: { type: 'string' },
          },
          'x-payment-response': {
            description: 'base64 JSON {success, transaction, network, payer}',
            schema: { type: 'string' },
          },
        },
        content: { '*/*': { schema: {} } },
      },
      '402': required402,
      '404': error('endpoint_not_found: unknown or disabled endpoint'),
      '409': error('payment_in_progress: another request is using this proof now (Retry-After)'),
      '502': error('upstream_unreachable / upstream_forbidden; the proof stays valid for a retry'),
      '503': error(
        'verification_unavailable: the chain could not be asked (Retry-After) / replication_unsafe: paid calls paused, no synchronous standby (database.require_synchronous_standby)',
      ),
      '504': error('upstream_timeout; the proof stays valid for a retry'),
    },
  })
  const html = { 'text/html': { schema: { type: 'string' } } }
  const receiptId = { name: 'receipt_id', in: 'path', required: true, schema: { type: 'string' } }
  const query = (name: string, description: string, type = 'string') => ({
    name,
    in: 'query',
    required: false,
    description,
    schema: { type },
  })
  return {
    '/discovery/resources': {
      get: {
        operationId: 'listDiscoveryResources',
        tags: ['discovery'],
        summary:
          "Every merchant's listed endpoints (an MCP endpoint: each paid tool) with what paid traffic observed over 7 days; no key needed",
        security: [],
        parameters: [
          query('limit', '1 to 100, default 20', 'integer'),
          query('offset', 'default 0', 'integer'),
          query('tag', 'only endpoints with this tag'),
          query('network', 'x402 v1 name or CAIP-2 id; another network lists nothing'),
          query('type', 'http (endpoints) or mcp (paid MCP tools, one item each)'),
          query(
            'min_price',
            "dollars; on the headline price (fixed price, rules default, usage ceiling; an MCP tool's own)",
          ),
          query('max_price', 'dollars'),
        ],
        responses: {
          '200': json('DiscoveryResources', 'one page, with the total'),
          '400': error('invalid_parameter: an unknown or malformed query parameter'),
        },
      },
    },
    '/.well-known/x402.json': {
      get: {
        operationId: 'getDiscoveryManifest',
        tags: ['discovery'],
        summary: "This host's listed endpoints, as the x402 per-origin discovery manifest; no key needed",
        security: [],
        responses: {
          '200': json('DiscoveryManifest', 'the manifest (advisory: the live 402 is authoritative)'),
        },
      },
    },
    '/openapi.json': {
      get: {
        operationId: 'getMppDiscovery',
        tags: ['discovery'],
        summary:
          "This host's listed endpoints that take MPP, as MPP's discovery document (x-payment-info); no key needed",
        security: [],
        responses: {
          '200': json('MppDiscoveryDocument', 'the document (advisory: the live 402 is authoritative)'),
        },
      },
    },
    '/llms.txt': {
      get: {
        operationId: 'getLlmsTxt',
        tags: ['discovery'],
        summary:
          'The same operations as /openapi.json, in Markdown for language models (llmstxt.org): URL, method, price; no key needed',
        security: [],
        responses: {
          '200': {
            description: 'the Markdown text (advisory: the live 402 is authoritative)',
            content: { 'text/markdown': { schema: { type: 'string' } } },
          },
        },
      },
    },
    '/.well-known/x402-receipt-keys.json': {
      get: {
        operationId: 'getReceiptKeys',
        tags: ['metered'],
        summary: 'The address that signs offers and receipts (EIP-712), and rotated-out ones still valid',
        security: [],
        responses: {
          '200': {
            description: '{format, current: {kid, address}, previous: [...], domains, call_receipt_types}',
            content: { 'application/json': { schema: { type: 'object' } } },
          },
        },
      },
    },
    '/receipts/{receipt_id}': {
      get: {
        operationId: 'getReceipt',
        tags: ['metered'],
        summary: "A paid call's receipt (its id is the answer's x-receipt-id header); no key needed",
        security: [],
        parameters: [receiptId],
        responses: {
          '200': json('Receipt', 'final: the call ended'),
          '404': error('not_found: unknown, or the call has not ended yet'),
        },
      },
    },
    '/m/{endpoint_id}': { get: metered('get'), post: metered('post') },
    '/pass/{endpoint_id}': {
      post: {
        operationId: 'buyPass',
        tags: ['metered'],
        summary:
          "Buy an endpoint's pass with any way the endpoint takes (any method; a client's retry of a paid purchase is not charged again)",
        description:
          'Without a payment: 402 with the pass price as the requirement. Paid: 201 with the pass and the payment receipt; ' +
          'the same payment again (before or after its settlement) buys no second pass and is not charged again: 200 with the same pass; ' +
          '402 proof_already_used when it paid for anything else (another endpoint, a call). Calls on the pass are made to /m/{endpoint_id} with a ' +
          'SIGN-IN-WITH-X header of the paying wallet.',
        security: [],
        parameters: [endpointId, ...proofHeaders],
        responses: {
          '200': json('Pass', 'the pass this payment bought earlier'),
          '201': json('Pass', 'bought now', {
            'payment-response': { description: 'x402 receipt, base64 JSON', schema: { type: 'string' } },
          }),
          '402': required402,
          '404': error('endpoint_not_found / pass_not_offered'),
          '409': error('payment_in_progress: another request is using this proof now (Retry-After)'),
          '503': error(
            'pass_opening (paid, retry with the same payment) / verification_unavailable / replication_unsafe',
          ),
        },
      },
    },
    '/pay/{payment_id}': {
      get: {
        operationId: 'getCheckout',
        tags: ['checkout'],
        summary: 'The hosted checkout: a page for browsers; for agents (Accept: application/json) the 402',
        security: [],
        parameters: [paymentId],
        responses: {
          '200': {
            description: 'paid (JSON), or the checkout page (text/html)',
            content: { 'application/json': { schema: ref('CheckoutStatus') }, ...html },
          },
          '402': required402,
          '404': error('payment_not_found'),
          '410': error('payment_expired / payment_canceled'),
        },
      },
      post: {
        operationId: 'payCheckout',
        tags: ['checkout'],
        summary: 'Pay a payment with a proof: a transaction hash, or an x402 exact authorization',
        description:
          'An x402 authorization is settled on chain before the payment is paid; the request waits for that and ' +
          'answers 200 with the PAYMENT-RESPONSE receipt, or 202 if it is still settling. A payment that is paid, ' +
          'expired or canceled answers 409/410 and the authorization is not used (nothing is charged).',
        security: [],
        parameters: [paymentId, ...proofHeaders],
        responses: {
          '200': json('CheckoutStatus', 'paid'),
          '202': {
            description: 'x402: the authorization is claimed and still settling; poll this URL',
            content: { 'application/json': { schema: { type: 'object' } } },
          },
          '402': required402,
          '404': error('payment_not_found'),
          '409': error('payment_already_paid (a transfer is refunded; an authorization is not used)'),
          '410': error(
            'payment_expired / payment_canceled (a transfer is refunded; an authorization is not used)',
          ),
          '503': error(
            'verification_unavailable / replication_unsafe (database.require_synchronous_standby)',
          ),
        },
      },
    },
    '/pay/{payment_id}/status': {
      get: {
        operationId: 'getCheckoutStatus',
        tags: ['checkout'],
        summary: 'The small JSON the checkout page polls',
        security: [],
        parameters: [paymentId],
        responses: {
          '200': json('CheckoutStatus', 'where the payment stands'),
          '404': error('payment_not_found'),
        },
      },
    },
    '/pay/{payment_id}/qr.svg': {
      get: {
        operationId: 'getCheckoutQr',
        tags: ['checkout'],
        summary: 'QR code of the EIP-681 transfer URI for the amount due',
        security: [],
        parameters: [paymentId],
        responses: {
          '200': { description: 'SVG', content: { 'image/svg+xml': { schema: { type: 'string' } } } },
          '404': error('payment_not_found'),
          '410': error('nothing is due (paid, expired or canceled)'),
        },
      },
    },
  }
}
