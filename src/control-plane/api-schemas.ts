// The valibot pieces every route's response schema is built from (timestamps, money pairs, lists, the error
// body), so the OpenAPI document and the presenters share one description of the wire format.
import * as v from 'valibot'
import { ERRORS } from '../errors.ts'

export const Timestamp = v.pipe(v.string(), v.isoTimestamp(), v.description('ISO 8601, UTC'))
export const NullableTimestamp = v.nullable(Timestamp)
/** Dollars as a JSON number (at most 6 decimals). */
export const Dollars = v.pipe(v.number(), v.description('US dollars (USDC), at most 6 decimal places'))
/** USDC base units (6 decimals) as a decimal string: exact where a JSON number is not. */
export const Atomic = v.pipe(
  v.string(),
  v.regex(/^\d+$/),
  v.description('USDC base units as a decimal string'),
)
export const Address = v.pipe(v.string(), v.regex(/^0x[0-9a-fA-F]{40}$/))
export const TxHash = v.pipe(v.string(), v.regex(/^0x[0-9a-fA-F]{64}$/))
export const Network = v.picklist(['local', 'base', 'base-sepolia'])
export const PricingModel = v.picklist(['fixed', 'rules', 'usage'])

/** What a usage-priced call measured and charged (GET /calls and the public receipt); null otherwise. */
export const CallUsage = v.nullable(
  v.strictObject({
    unit: v.picklist(['response_bytes', 'duration_ms', 'tokens']),
    quantities: v.record(v.string(), v.number()),
    charge_atomic: Atomic,
    ceiling_atomic: v.nullable(Atomic),
    refunded_atomic: v.pipe(Atomic, v.description('the unused part of a prepaid ceiling, paid back')),
    source: v.picklist(['measured', 'fallback']),
    fallback: v.nullable(v.picklist(['missing', 'malformed', 'client_aborted'])),
    capped: v.pipe(v.boolean(), v.description('the measured charge was above the ceiling')),
  }),
)

/** A WebSocket session's row (GET /calls): the session on its opening row; a top-up's row names that row. */
export const CallSession = v.pipe(
  v.nullable(
    v.strictObject({
      call_id: v.pipe(
        v.string(),
        v.description("the session's row: this call, or the opening call a top-up paid for"),
      ),
      duration_ms: v.pipe(
        v.nullable(v.number()),
        v.description("from the upgrade to the close; null on a top-up's row"),
      ),
      ended_by: v.pipe(
        v.nullable(v.picklist(['client', 'upstream', 'credit', 'window', 'too_big', 'backpressure'])),
        v.description("who or what ended the session; null on a top-up's row"),
      ),
      charge: v.pipe(v.nullable(Dollars), v.description('charge_atomic in dollars')),
      charge_atomic: v.pipe(
        v.nullable(Atomic),
        v.description(
          "the session's whole charge, across its opening payment and top-ups; null on a top-up's row",
        ),
      ),
      payments: v.pipe(v.nullable(v.number()), v.description('the payments that funded it (1 + top-ups)')),
      top_up_call_ids: v.array(v.string()),
    }),
  ),
  v.description('a paid WebSocket session (docs/websockets.md); null for any other call'),
)

/** A paid call to an endpoint with identity rules: who called, and the rule that priced it. */
export const CallAgentView = v.pipe(
  v.nullable(
    v.strictObject({
      signer: v.pipe(
        v.string(),
        v.description(
          'the operator’s name for the directory or key that verified the signature; "unsigned" otherwise',
        ),
      ),
      keyid: v.pipe(v.nullable(v.string()), v.description('the key id of a verified signature')),
      failure: v.pipe(
        v.nullable(v.string()),
        v.description('why a signature that was sent did not verify (the call was priced as unsigned)'),
      ),
      rule: v.pipe(
        v.nullable(v.number()),
        v.description('the index of the identity rule that priced the call; null: none matched'),
      ),
      action: v.picklist(['free', 'price', 'multiplier', 'endpoint_price']),
    }),
  ),
  v.description('who called, on an endpoint with identity rules; null on every other call'),
)

/** Cursor-paginated list: newest first; pass the last id as starting_after for the next page. */
export function listOf<S extends v.GenericSchema>(item: S) {
  return v.strictObject({ object: v.literal('list'), data: v.array(item), has_more: v.boolean() })
}

export const ApiErrorBody = v.pipe(
  v.strictObject({
    error: v.strictObject({
      type: v.string(),
      code: v.picklist(Object.keys(ERRORS) as [keyof typeof ERRORS, ...(keyof typeof ERRORS)[]]),
      message: v.string(),
      param: v.optional(v.string()),
    }),
    request_id: v.string(),
  }),
  v.description('Every /api/v1 error. `param` names the field or parameter at fault.'),
)

export const DeletedObject = v.strictObject({
  id: v.string(),
  object: v.string(),
  deleted: v.literal(true),
})

/** Query parameters every list route takes. */
export const PageQuery = v.strictObject({
  limit: v.optional(
    v.pipe(v.number(), v.integer(), v.minValue(1), v.maxValue(100), v.description('1–100, default 10')),
  ),
  starting_after: v.optional(
    v.pipe(v.string(), v.description('the id of the last object of the previous page')),
  ),
})
