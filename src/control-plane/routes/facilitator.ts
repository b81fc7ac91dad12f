// /facilitator: tollgate as an x402 facilitator for merchants who keep their own middleware (@x402/express,
// @x402/hono with HTTPFacilitatorClient({ url: '<tollgate>/api/v1/facilitator', createAuthHeaders })).
// GET /supported, POST /verify, POST /settle as the x402 specification (v2 §7) and @x402/core's client
// have them; authenticated by the account's API key. A settled payload (exact, or upto for the amount the
// middleware settles) is claimed like any proof under the payer's reservation, joins the settlement batch,
// and /settle answers once its transaction is mined (docs/facilitator.md).
import * as v from 'valibot'
import { type Address, getAddress } from 'viem'
import {
  type FacilitatorSettlementState,
  proofClaimed,
  readFacilitatorSettlement,
} from '../../books/facilitator.ts'
import type { BalanceRead } from '../../chain/check-authorization.ts'
import type { StoredAuthorization } from '../../chain/settle.ts'
import { facilitatorResourceOf } from '../../discovery/facilitator-resource.ts'
import { ApiError } from '../../errors.ts'
import { facilitatorSettleChecks } from '../../observability/metrics.ts'
import { EIP2612_GAS_SPONSORING } from '../../schemes/upto/permit-payload.ts'
import { type Checked, checkTerms, exactChainFailure, type Terms } from '../facilitator-check.ts'
import { FacilitatorClaims } from '../facilitator-claims.ts'
import { FacilitatorReads } from '../facilitator-reads.ts'
import { checkUptoTerms, uptoChainFailure } from '../facilitator-upto-check.ts'
import { FacilitatorVerdicts } from '../facilitator-verdicts.ts'
import { FacilitatorWaits } from '../facilitator-waits.ts'
import type { Route, RouteContext } from '../route.ts'
import { parseBody } from '../validation.ts'

const Uint = v.pipe(
  v.string('must be a string of digits'),
  v.regex(/^\d{1,78}$/, 'must be a string of digits'),
)
const HexAddress = v.pipe(
  v.string('must be an address'),
  v.regex(/^0x[0-9a-fA-F]{40}$/, 'must be an address'),
)
const Extra = v.optional(v.nullable(v.record(v.string(), v.unknown())))

const RequirementsV1 = v.looseObject({
  scheme: v.string(),
  network: v.string(),
  maxAmountRequired: Uint,
  asset: HexAddress,
  payTo: HexAddress,
  maxTimeoutSeconds: v.optional(v.number()),
  extra: Extra,
})
const RequirementsV2 = v.looseObject({
  scheme: v.string(),
  network: v.string(),
  amount: Uint,
  asset: HexAddress,
  payTo: HexAddress,
  maxTimeoutSeconds: v.optional(v.number()),
  extra: Extra,
})
const PayloadV1 = v.looseObject({
  x402Version: v.literal(1),
  scheme: v.string(),
  network: v.string(),
  payload: v.pipe(v.unknown(), v.description('the scheme payload: for exact, signature and authorization')),
})
const PayloadV2 = v.looseObject({
  x402Version: v.literal(2),
  accepted: RequirementsV2,
  payload: v.pipe(v.unknown(), v.description('the scheme payload: for exact, signature and authorization')),
  extensions: v.optional(v.nullable(v.record(v.string(), v.unknown()))),
})
/** What HTTPFacilitatorClient sends to /verify and /settle: the version on top, then payload and requirements. */
export const FacilitatorRequest = v.variant('x402Version', [
  v.looseObject({
    x402Version: v.literal(1),
    paymentPayload: PayloadV1,
    paymentRequirements: RequirementsV1,
  }),
  v.looseObject({
    x402Version: v.literal(2),
    paymentPayload: PayloadV2,
    paymentRequirements: RequirementsV2,
  }),
])
type FacilitatorRequest = v.InferOutput<typeof FacilitatorRequest>

const VerifyResponse = v.object({
  isValid: v.boolean(),
  invalidReason: v.optional(v.string()),
  invalidMessage: v.optional(v.string()),
  payer: v.optional(v.string()),
})
const SettleResponse = v.object({
  success: v.boolean(),
  errorReason: v.optional(
    v.pipe(v.string(), v.description('settlement_pending: not mined within the wait; the hash when sent')),
  ),
  errorMessage: v.optional(v.string()),
  payer: v.optional(v.string()),
  transaction: v.string(),
  network: v.string(),
  amount: v.optional(v.string()),
})
const SupportedResponse = v.object({
  kinds: v.array(
    v.object({ x402Version: v.number(), scheme: v.string(), network: v.string(), extra: v.optional(Extra) }),
  ),
  extensions: v.array(v.string()),
  signers: v.record(v.string(), v.array(v.string())),
})

type VerifyAnswer = v.InferOutput<typeof VerifyResponse>
type SettleAnswer = v.InferOutput<typeof SettleResponse>

function termsOf(b: FacilitatorRequest): Terms {
  if (b.x402Version === 1) {
    const r = b.paymentRequirements
    return {
      x402Version: 1,
      scheme: r.scheme,
      network: r.network,
      amount: r.maxAmountRequired,
      asset: r.asset,
      payTo: r.payTo,
      extra: r.extra,
      payloadScheme: b.paymentPayload.scheme,
      payloadNetwork: b.paymentPayload.network,
      payload: b.paymentPayload.payload,
    }
  }
  const r = b.paymentRequirements
  const a = b.paymentPayload.accepted
  return {
    x402Version: 2,
    scheme: r.scheme,
    network: r.network,
    amount: r.amount,
    asset: r.asset,
    payTo: r.payTo,
    extra: r.extra,
    accepted: a,
    payloadScheme: a.scheme,
    payloadNetwork: a.network,
    payload: b.paymentPayload.payload,
    extensions: b.paymentPayload.extensions ?? undefined,
  }
}

async function check(
  ctx: RouteContext,
  body: FacilitatorRequest,
  phase: 'verify' | 'settle',
): Promise<Checked> {
  const terms = termsOf(body)
  const context = {
    chain: ctx.deps.chain,
    accountWallet: ctx.account.wallet_address,
    nowSeconds: BigInt(Math.floor(Date.now() / 1000)),
    verifySmartWallet: ctx.deps.verifySmartWallet,
    verifyWalletDigest: ctx.deps.verifyWalletDigest,
  }
  if (terms.scheme !== 'upto') return checkTerms(terms, context)
  const facilitator = (await ctx.deps.upto?.facilitator()) ?? null
  return checkUptoTerms(terms, { ...context, facilitator, phase })
}

function chainChecker(ctx: RouteContext) {
  const checker = ctx.deps.checkAuthorization
  if (!checker)
    throw new ApiError('service_unavailable', 'this instance cannot read the chain for the facilitator')
  return checker
}

type ChainAnswer = { ok: true; balance: BalanceRead } | { ok: false; reason: string; message: string }

/**
 * The chain's part (nonce unused, balance enough: an upto permit's maximum, and its Permit2 allowance). What
 * the payer's other unsettled payments hold against that balance is /verify's next read and the claim's
 * check under the payer's lock.
 */
async function readChain(ctx: RouteContext, c: Checked & { ok: true }): Promise<ChainAnswer> {
  if (c.kind === 'upto') {
    const upto = ctx.deps.upto
    if (!upto) throw new ApiError('service_unavailable', 'this instance cannot read the chain for upto')
    const read = await upto.check(c.permit, c.approval)
    if (!read.ok) return { ok: false, ...uptoChainFailure(read)! }
    return { ok: true, balance: read.balance }
  }
  const read = await chainChecker(ctx)({ from: c.payer, nonce: c.nonce, value: c.valueAtomic })
  if (!read.ok) return { ok: false, ...exactChainFailure(read)! }
  return { ok: true, balance: read.balance }
}

const INSUFFICIENT = 'the payer cannot cover it on top of its payments not settled yet'
const CLAIMED = 'this authorization was already used through tollgate'

/**
 * /verify's verdict after the local checks: the chain, then one read of whether tollgate claimed the proof
 * already and what the payer's other unsettled payments hold (payer_reserved, every instance, metered or
 * facilitated): the amount must fit in the rest. Reads only; the claim checks the rest again under the
 * payer's lock. A claimed proof is refused as such whatever the chain says.
 */
async function verifyFunds(ctx: RouteContext, c: Checked & { ok: true }): Promise<ChainAnswer> {
  const chain = await readChain(ctx, c)
  if (!chain.ok) {
    if (await proofClaimed(ctx.deps.sql, c.proofKey))
      return { ok: false, reason: 'proof_already_used', message: CLAIMED }
    return chain
  }
  const held = await readsOf(ctx).read({
    proofKey: c.proofKey,
    payer: c.payer,
    block: chain.balance.block,
  })
  if (held.claimed) return { ok: false, reason: 'proof_already_used', message: CLAIMED }
  if (chain.balance.atomic - held.reserved < c.valueAtomic)
    return { ok: false, reason: 'insufficient_funds', message: INSUFFICIENT }
  return chain
}

function networkOf(ctx: RouteContext, body: FacilitatorRequest): string {
  return body.x402Version === 1 ? ctx.deps.chain.x402Network : ctx.deps.chain.caip2
}

/** The answer a settlement's state gives: settled, failed, or still pending (with its hash once sent). */
function settleAnswer(s: FacilitatorSettlementState, network: string): SettleAnswer | null {
  const base = { payer: getAddress(s.payer), network, amount: s.amount_atomic.toString() }
  const tx = s.settlement_tx ?? s.claim_settlement_tx
  if (s.claim_status === 'applied' || s.settled_at !== null)
    return { success: true, transaction: tx ?? '', ...base }
  if (s.settlement_error !== null)
    return {
      success: false,
      errorReason: `settlement_${s.settlement_error}`,
      errorMessage: `the authorization was not settled: ${s.settlement_error}`,
      transaction: tx ?? '',
      ...base,
    }
  return null
}

/** One per database in this process, made on first use (the group commits, the verdicts, the waits). */
function perDatabase<T>(make: (sql: RouteContext['deps']['sql']) => T): (ctx: RouteContext) => T {
  const made = new WeakMap<object, T>()
  return (ctx) => {
    let v = made.get(ctx.deps.sql)
    if (v === undefined) {
      v = make(ctx.deps.sql)
      made.set(ctx.deps.sql, v)
    }
    return v
  }
}

/** How each /settle's payload was checked (the labels bound once). */
const settleChecked = {
  verdict: facilitatorSettleChecks.labels('verdict'),
  full: facilitatorSettleChecks.labels('full'),
}

/** The process's claim and /verify read group commits and held verdicts, by database. */
const claimsOf = perDatabase((sql) => new FacilitatorClaims(sql))
const readsOf = perDatabase((sql) => new FacilitatorReads(sql))
const verdictsOf = perDatabase(() => new FacilitatorVerdicts())

/** The process's shared wait for settlement outcomes, by database (the wired one, or one made here). */
const madeWaits = perDatabase((sql) => new FacilitatorWaits(sql))
function waitsOf(ctx: RouteContext): FacilitatorWaits {
  return ctx.deps.facilitator?.waits ?? madeWaits(ctx)
}

/**
 * Waits (bounded, from the request's start) for the transaction carrying this payload: this process's
 * settler tells it directly; any other outcome (another instance's claim, the leader's batch) is read by
 * the shared wait. The first outcome is the answer.
 */
async function awaitOutcome(
  ctx: RouteContext,
  q: { proofKey: string; network: string; untilMs: number },
): Promise<SettleAnswer> {
  const s = await waitsOf(ctx).wait(ctx.account.id, q.proofKey, q.untilMs)
  if (!s)
    throw new ApiError('service_unavailable', 'the settlement could not be read; retry to get its outcome')
  const answer = settleAnswer(s, q.network)
  if (answer !== null) return answer
  // As @x402/core reads it: not failed, not final; the hash (when sent) to follow up.
  return {
    success: false,
    errorReason: 'settlement_pending',
    errorMessage: 'the settlement batch carrying this payment is not mined yet; retry to get its outcome',
    transaction: s.claim_settlement_tx ?? '',
    payer: getAddress(s.payer),
    network: q.network,
    amount: s.amount_atomic.toString(),
  }
}

function refusedSettle(
  r: { reason: string; message: string; payer?: Address },
  network: string,
): SettleAnswer {
  return {
    success: false,
    errorReason: r.reason,
    errorMessage: r.message,
    transaction: '',
    network,
    ...(r.payer ? { payer: r.payer } : {}),
  }
}

/**
 * /settle's part after the checks: the claim of this payload (new or a retry's), or the refusal. The chain is
 * asked first (the nonce and the balance, reused as the data plane's are), unless this body's /verify just
 * read them (`known`: its balance read); the payer reservation is checked once, by the claim under the
 * payer's lock.
 */
async function claimOrFind(
  ctx: RouteContext,
  body: FacilitatorRequest,
  checked: Checked & { ok: true },
  q: { network: string; known: BalanceRead | null },
): Promise<{ refused: SettleAnswer } | { claimed: boolean }> {
  const { network } = q
  // claimed: new, and to be sent by this process's group commit.
  const { account, deps } = ctx
  const mine = { accountId: account.id, proofKey: checked.proofKey }
  // Sent by this process's group commit (an `exact` payload, a settler slot with gas), else the leader's.
  const here = checked.kind !== 'upto' && deps.facilitator?.settler?.usable() === true
  const funds: ChainAnswer = q.known ? { ok: true, balance: q.known } : await readChain(ctx, checked)
  if (!funds.ok) {
    // The chain says used: maybe by this payload's own settlement (a retry, here or on another instance).
    if ((await readFacilitatorSettlement(deps.sql, mine)) !== null) return { claimed: false }
    return { refused: refusedSettle({ ...funds, payer: checked.payer }, network) }
  }
  const claim = await claimsOf(ctx).claim({
    accountId: account.id,
    proofKey: checked.proofKey,
    paymentIdentifier: checked.paymentIdentifier,
    custody: checked.custody,
    payTo: checked.payTo,
    payer: checked.payer,
    valueAtomic: checked.valueAtomic,
    network,
    x402Version: body.x402Version,
    kind: checked.kind,
    authorization: checked.authorization,
    ownerShareBps: deps.config.fees.owner_share_bps,
    reserve: { balanceAtomic: funds.balance.atomic, block: funds.balance.block },
    // A payload carrying the bazaar extension lists its resource in /discovery/resources once settled.
    resource: facilitatorResourceOf(body.paymentPayload, body.paymentRequirements),
    groupCommit: here,
  })
  if (claim.kind === 'claimed' || claim.kind === 'existing')
    return { claimed: claim.kind === 'claimed' && here }
  // Refused for funds: the next check reads the balance again (a top-up shows).
  if (claim.kind === 'insufficient_funds' && checked.kind !== 'upto') chainChecker(ctx).forget(checked.payer)
  const refusal = CLAIM_REFUSALS[claim.kind]
  return { refused: refusedSettle({ ...refusal, payer: checked.payer }, network) }
}

/**
 * A new `exact` claim this process's facilitator settlement group commit sends; settled there, the answer is
 * known without a read. Null: the shared wait reads the outcome.
 */
async function settleHere(
  ctx: RouteContext,
  checked: Checked & { ok: true },
  network: string,
  untilMs: number,
): Promise<SettleAnswer | null> {
  const settler = ctx.deps.facilitator?.settler
  if (!settler) return null
  let timer: NodeJS.Timeout | undefined
  const sent = await Promise.race([
    settler.settle(checked.proofKey, checked.authorization as StoredAuthorization),
    // The request's wait bounds this one too: past it, the shared wait answers pending.
    new Promise<null>((resolve) => {
      timer = setTimeout(() => resolve(null), Math.max(0, untilMs - performance.now()))
    }),
  ])
  clearTimeout(timer)
  if (sent?.state !== 'settled') return null
  // The same body a retry reads from the books (settleAnswer): the transaction, payer, network, amount.
  return {
    success: true,
    transaction: sent.transaction,
    payer: getAddress(checked.payer),
    network,
    amount: checked.valueAtomic.toString(),
  }
}

const CLAIM_REFUSALS = {
  proof_already_used: {
    reason: 'proof_already_used',
    message: 'this authorization already paid through tollgate',
  },
  payment_identifier_conflict: {
    reason: 'payment_identifier_conflict',
    message: 'this payment-identifier was settled with another payload',
  },
  insufficient_funds: { reason: 'insufficient_funds', message: INSUFFICIENT },
} as const

export const facilitatorRoutes: Route[] = [
  {
    method: 'GET',
    path: '/facilitator/supported',
    auth: true,
    doc: {
      summary: 'x402 facilitator: the payment kinds this facilitator verifies and settles',
      response: { status: 200, schema: SupportedResponse },
    },
    async handler({ deps }) {
      const { chain } = deps
      const extra = { name: chain.usdcName, version: chain.usdcVersion }
      const upto = (await deps.upto?.facilitator()) ?? null
      return {
        status: 200,
        body: {
          kinds: [
            { x402Version: 1, scheme: 'exact', network: chain.x402Network, extra },
            { x402Version: 2, scheme: 'exact', network: chain.caip2, extra },
            // The account payers name in the permit's witness: the only one the upto proxy lets settle it.
            ...(upto === null
              ? []
              : [
                  {
                    x402Version: 2,
                    scheme: 'upto',
                    network: chain.caip2,
                    extra: { facilitatorAddress: upto },
                  },
                ]),
          ],
          // bazaar: a settled payload carrying it is cataloged in /discovery/resources. eip2612GasSponsoring:
          // an upto payer that never approved Permit2 signs an EIP-2612 approval, submitted at settlement.
          extensions: ['payment-identifier', 'bazaar', ...(upto === null ? [] : [EIP2612_GAS_SPONSORING])],
          // The treasury signs the settlement batches (they carry every authorization, whoever it pays), and
          // this instance's facilitator settler its own group commit's.
          signers: {
            'eip155:*': [
              chain.treasury,
              ...(deps.facilitator?.settler ? [deps.facilitator.settler.address] : []),
            ],
          },
        },
      }
    },
  },
  {
    method: 'POST',
    path: '/facilitator/verify',
    auth: true,
    doc: {
      summary:
        'x402 facilitator: verify an exact or upto payload against its requirements (nothing is claimed)',
      body: FacilitatorRequest,
      response: { status: 200, schema: VerifyResponse },
    },
    async handler(ctx) {
      const body = parseBody(FacilitatorRequest, ctx.body)
      const checked = await check(ctx, body, 'verify')
      const invalid = (
        reason: string,
        message: string,
        payer?: string,
      ): { status: number; body: VerifyAnswer } => ({
        status: 200,
        body: { isValid: false, invalidReason: reason, invalidMessage: message, ...(payer ? { payer } : {}) },
      })
      if (!checked.ok) return invalid(checked.reason, checked.message, checked.payer)
      const funds = await verifyFunds(ctx, checked)
      if (!funds.ok) return invalid(funds.reason, funds.message, checked.payer)
      // Held for this body's /settle, which then neither recovers the signature nor reads the chain again.
      if (checked.kind === 'eip3009')
        verdictsOf(ctx).hold(FacilitatorVerdicts.keyOf(ctx.account, ctx.req.body), {
          checked,
          balance: funds.balance,
        })
      return { status: 200, body: { isValid: true, payer: checked.payer } satisfies VerifyAnswer }
    },
  },
  {
    method: 'POST',
    path: '/facilitator/settle',
    auth: true,
    doc: {
      summary: 'x402 facilitator: settle an exact or upto payload, once, in the settlement batch',
      description:
        'Idempotent: the same payload (or payment-identifier) settles once, and a retry gets its outcome. ' +
        "upto settles for the requirements' amount, at most the signed maximum (0: nothing is sent). " +
        'Answers when the transaction carrying it is mined, or after facilitator.settle_wait_ms with ' +
        'errorReason settlement_pending.',
      body: FacilitatorRequest,
      response: { status: 200, schema: SettleResponse },
    },
    async handler(ctx) {
      const body = parseBody(FacilitatorRequest, ctx.body)
      const network = networkOf(ctx, body)
      const nowSeconds = BigInt(Math.floor(Date.now() / 1000))
      const verdict = verdictsOf(ctx).take(FacilitatorVerdicts.keyOf(ctx.account, ctx.req.body), nowSeconds)
      if (verdict) settleChecked.verdict.inc()
      else settleChecked.full.inc()
      const checked = verdict?.checked ?? (await check(ctx, body, 'settle'))
      if (!checked.ok) return { status: 200, body: refusedSettle(checked, network) }
      // upto charged nothing: nothing to send, nothing claimed (the permit stays unspent), as the published
      // upto facilitator answers it.
      if (checked.kind === 'upto' && checked.valueAtomic === 0n)
        return {
          status: 200,
          body: { success: true, transaction: '', network, payer: checked.payer, amount: '0' },
        }
      const untilMs = performance.now() + ctx.deps.config.facilitator.settle_wait_ms
      const claim = await claimOrFind(ctx, body, checked, { network, known: verdict?.balance ?? null })
      if ('refused' in claim) return { status: 200, body: claim.refused }
      const here = claim.claimed ? await settleHere(ctx, checked, network, untilMs) : null
      if (here !== null) return { status: 200, body: here }
      return { status: 200, body: await awaitOutcome(ctx, { proofKey: checked.proofKey, network, untilMs }) }
    },
  },
]
