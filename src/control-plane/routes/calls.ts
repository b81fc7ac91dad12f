// GET /calls: an owner's captured metered calls, newest first, filtered by endpoint, upstream status, time,
// tool; a usage-priced call shows what was measured, charged and refunded of its ceiling; an endpoint with
// identity rules, who called and the rule that priced the call.
import * as v from 'valibot'
import { protocolOf } from '../../books/protocols.ts'
import { agentView, type CallRow, listCalls, sessionView, usageView } from '../../db/calls.ts'
import { ApiError } from '../../errors.ts'
import { toDollars } from '../../money.ts'
import {
  Atomic,
  CallAgentView,
  CallSession,
  CallUsage,
  Dollars,
  listOf,
  PricingModel,
  Timestamp,
} from '../api-schemas.ts'
import { listResponse, readPage } from '../pagination.ts'
import type { Route } from '../route.ts'

/** What a paid MCP call is recorded under: a tool name, `resource:<uri>` or `prompt:<name>` (src/mcp/). */
const CALL_SUBJECT = /^(?:[A-Za-z0-9_./-]{1,128}|resource:[^\p{Cc}\s]{1,2048}|prompt:\P{Cc}{1,128})$/u

export const CallObject = v.strictObject({
  id: v.string(),
  object: v.literal('call'),
  endpoint_id: v.string(),
  payer: v.string(),
  proof: v.pipe(v.string(), v.description('the transaction hash, or the x402 authorization key')),
  amount: Dollars,
  amount_atomic: Atomic,
  owner_share_atomic: Atomic,
  fee_atomic: Atomic,
  upstream_status: v.number(),
  method: v.string(),
  tool: v.pipe(
    v.nullable(v.string()),
    v.description(
      'the MCP tool a paid tools/call named (resource:<uri> for a priced resources/read, prompt:<name> for a ' +
        'priced prompts/get); null otherwise',
    ),
  ),
  pricing_model: PricingModel,
  scheme: v.pipe(
    v.nullable(v.string()),
    v.description(
      'how it was paid: tx-hash, exact (x402), upto, batch-settlement, mpp-charge (MPP evm charge); null for calls before schemes were recorded',
    ),
  ),
  protocol: v.pipe(
    v.nullable(v.picklist(['x402', 'mpp', 'tx-hash', 'channel', 'pass'])),
    v.description(
      'which protocol paid: x402 (exact, upto), mpp (MPP evm charge), tx-hash (a transfer named by its hash), channel (x402 batch-settlement vouchers), pass (a use of a pass); null when scheme is',
    ),
  ),
  usage: CallUsage,
  session: CallSession,
  agent: CallAgentView,
  created_at: Timestamp,
})

export function presentCall(c: CallRow): v.InferOutput<typeof CallObject> {
  return {
    id: c.id,
    object: 'call',
    endpoint_id: c.endpoint_id,
    payer: c.payer,
    proof: c.proof_key.startsWith('tx:') ? c.proof_key.slice(3) : c.proof_key,
    amount: toDollars(c.amount_atomic),
    amount_atomic: c.amount_atomic.toString(),
    owner_share_atomic: c.owner_share_atomic.toString(),
    fee_atomic: c.fee_atomic.toString(),
    upstream_status: c.upstream_status,
    method: c.method,
    tool: c.tool ?? null,
    pricing_model: c.pricing_model as v.InferOutput<typeof PricingModel>,
    scheme: c.scheme ?? null,
    protocol: protocolOf(c.scheme),
    usage: usageView(c) as v.InferOutput<typeof CallUsage>,
    session: presentSession(c),
    agent: agentView(c) as v.InferOutput<typeof CallAgentView>,
    created_at: c.created_at.toISOString(),
  }
}

/** A session's row: its whole charge also in dollars, as a call's amount is. */
function presentSession(c: CallRow): v.InferOutput<typeof CallSession> {
  const s = sessionView(c)
  if (s === null) return null
  return {
    call_id: s.call_id,
    duration_ms: s.duration_ms,
    ended_by: s.ended_by,
    charge: s.charge_atomic === null ? null : toDollars(BigInt(s.charge_atomic)),
    charge_atomic: s.charge_atomic,
    payments: s.payments,
    top_up_call_ids: s.top_up_call_ids,
  } as v.InferOutput<typeof CallSession>
}

export const callRoutes: Route[] = [
  {
    method: 'GET',
    path: '/calls',
    auth: true,
    doc: {
      summary: 'Captured metered calls, newest first',
      list: true,
      query: {
        endpoint_id: v.optional(v.string()),
        tool: v.optional(v.string()),
        upstream_status: v.optional(
          v.pipe(v.string(), v.description('a status class (2xx, 3xx, 4xx) or one status, e.g. 404')),
        ),
        created_gte: v.optional(v.pipe(v.string(), v.description('ISO 8601 date or time: at or after'))),
        created_lt: v.optional(v.pipe(v.string(), v.description('ISO 8601 date or time: before'))),
      },
      response: { status: 200, schema: listOf(CallObject) },
    },
    async handler({ query, account, db }) {
      const page = readPage(query)
      const endpointId = query.get('endpoint_id')
      if (endpointId !== null && !/^ep_[0-9A-Za-z]+$/.test(endpointId)) {
        throw new ApiError('invalid_parameter', 'endpoint_id: must be an endpoint id', 'endpoint_id')
      }
      const tool = query.get('tool')
      if (tool !== null && !CALL_SUBJECT.test(tool)) {
        throw new ApiError(
          'invalid_parameter',
          'tool: must be an MCP tool name, resource:<uri> or prompt:<name>',
          'tool',
        )
      }
      const rows = await listCalls(db, {
        accountId: account.id,
        endpointId,
        status: readStatusFilter(query.get('upstream_status')),
        createdGte: readTime(query, 'created_gte'),
        createdLt: readTime(query, 'created_lt'),
        tool,
        limit: page.limit + 1,
        startingAfter: page.startingAfter,
      })
      return { status: 200, body: listResponse(rows, page, presentCall) }
    },
  },
]

function readStatusFilter(raw: string | null): { from: number; to: number } | null {
  if (raw === null) return null
  const cls = /^([1-5])xx$/i.exec(raw)
  if (cls) return { from: Number(cls[1]) * 100, to: Number(cls[1]) * 100 + 100 }
  if (/^[1-5]\d\d$/.test(raw)) return { from: Number(raw), to: Number(raw) + 1 }
  throw new ApiError(
    'invalid_parameter',
    'upstream_status: must be a status class (2xx, 4xx) or a status code',
    'upstream_status',
  )
}

function readTime(query: URLSearchParams, name: string): Date | null {
  const raw = query.get(name)
  if (raw === null) return null
  const at = /^\d{4}-\d{2}-\d{2}(T[\d:.]+(Z|[+-]\d{2}:\d{2}))?$/.test(raw) ? new Date(raw) : null
  if (!at || Number.isNaN(at.getTime()))
    throw new ApiError('invalid_parameter', `${name}: must be an ISO 8601 date or time`, name)
  return at
}
