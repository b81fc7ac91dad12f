// x402 `batch-settlement` on the metered path: a PAYMENT-SIGNATURE whose `accepted.scheme` is
// batch-settlement carries a deposit, a voucher or a refund for a channel (the scheme is described in
// src/chain/batch-channel.ts). A voucher is checked with a local signature recovery (no RPC); its increment
// is accepted once across instances by the instance holding the channel's lease, in memory
// (leases.ts: no database round trip per call), and the call then goes upstream; the
// voucher and the call are persisted in group-committed writes. Deposits and refunds are transactions: the
// leader sends them (one treasury nonce sequence), the request waits for the outcome.
import * as v from 'valibot'
import { type Address, encodeAbiParameters, getAddress, type Hex, keccak256 } from 'viem'
import {
  batchProofKey,
  findChannel,
  findChannelOp,
  requestChannelOp,
  requestRefundOp,
} from '../../books/channels.ts'
import {
  BATCH_SCHEME,
  type ChannelConfig,
  channelIdOf,
  depositCalldata,
  erc3009CollectorData,
  voucherDigestBytes,
} from '../../chain/batch-channel.ts'
import { recoverSigner } from '../../chain/recover-authorization.ts'
import type { Sql } from '../../db/sql.ts'
import type { ChannelView, Lease, VoucherLeases } from './leases.ts'

/** The withdraw delay tollgate asks for (the scheme's minimum): the leader claims well within it. */
export const BATCH_WITHDRAW_DELAY_S = 900

// Error codes as the published scheme names them (@x402/evm batch-settlement/errors.ts): the client's
// corrective path keys on the first two.
export const BATCH_ERR = {
  mismatch: 'invalid_batch_settlement_evm_cumulative_amount_mismatch',
  belowClaimed: 'invalid_batch_settlement_evm_cumulative_below_claimed',
  exceedsBalance: 'invalid_batch_settlement_evm_cumulative_exceeds_balance',
  signature: 'invalid_batch_settlement_evm_voucher_signature',
  channelId: 'invalid_batch_settlement_evm_channel_id_mismatch',
  receiver: 'invalid_batch_settlement_evm_receiver_mismatch',
  receiverAuthorizer: 'invalid_batch_settlement_evm_receiver_authorizer_mismatch',
  token: 'invalid_batch_settlement_evm_token_mismatch',
  withdrawDelay: 'invalid_batch_settlement_evm_withdraw_delay_mismatch',
  notFound: 'invalid_batch_settlement_evm_channel_not_found',
  deposit: 'invalid_batch_settlement_evm_deposit_transaction_failed',
  refund: 'invalid_batch_settlement_evm_refund_transaction_failed',
  refundNoBalance: 'invalid_batch_settlement_evm_refund_no_balance',
  busy: 'invalid_batch_settlement_evm_channel_busy',
  payload: 'invalid_batch_settlement_evm_payload_type',
  network: 'invalid_batch_settlement_evm_network_mismatch',
} as const

const Hex32 = v.pipe(v.string(), v.regex(/^0x[0-9a-fA-F]{64}$/))
const Addr = v.pipe(v.string(), v.regex(/^0x[0-9a-fA-F]{40}$/))
const Sig = v.pipe(v.string(), v.regex(/^0x[0-9a-fA-F]{130,}$/))
const UintText = v.pipe(v.string(), v.regex(/^\d{1,38}$/))

const Config = v.object({
  payer: Addr,
  payerAuthorizer: Addr,
  receiver: Addr,
  receiverAuthorizer: Addr,
  token: Addr,
  withdrawDelay: v.pipe(v.number(), v.integer()),
  salt: Hex32,
})
const Voucher = v.object({ channelId: Hex32, maxClaimableAmount: UintText, signature: Sig })
const Payload = v.variant('type', [
  v.object({
    type: v.literal('deposit'),
    channelConfig: Config,
    voucher: Voucher,
    deposit: v.object({
      amount: UintText,
      authorization: v.object({
        erc3009Authorization: v.object({
          validAfter: UintText,
          validBefore: UintText,
          salt: Hex32,
          signature: Sig,
        }),
      }),
    }),
  }),
  v.object({ type: v.literal('voucher'), channelConfig: Config, voucher: Voucher }),
  v.object({
    type: v.literal('refund'),
    channelConfig: Config,
    voucher: Voucher,
    amount: v.optional(UintText),
  }),
])
const Envelope = v.object({
  x402Version: v.literal(2),
  accepted: v.object({ scheme: v.literal(BATCH_SCHEME), network: v.string() }),
  payload: Payload,
})

export type BatchPayment = v.InferOutput<typeof Envelope>

/** A batch-settlement payment, or null when the payload is another scheme's (or not one at all). */
export function parseBatchPayment(payload: unknown): BatchPayment | null | 'invalid' {
  const o = payload as { accepted?: { scheme?: unknown } } | null
  if (o?.accepted?.scheme !== BATCH_SCHEME) return null
  const parsed = v.safeParse(Envelope, payload)
  return parsed.success ? parsed.output : 'invalid'
}

export interface BatchDeps {
  sql: Sql
  chainId: number
  caip2: string
  treasury: Address
  usdc: Address
  /** How long a request waits for its deposit or refund transaction. */
  opWaitMs: number
  /** The channels this instance holds and accepts vouchers for in memory. */
  leases: VoucherLeases
}

/** A voucher increment accepted: the call may be claimed and served. */
export interface BatchVerified {
  ok: true
  kind: 'batch'
  proofKey: string
  payer: `0x${string}`
  valueAtomic: bigint
  transaction: null
  /** The PAYMENT-RESPONSE header (base64) the paid answer carries. */
  receipt: string
  /** The lease that accepted it: the call reports back to it (served, released, in doubt). */
  lease: Lease
  channelId: string
  cumulative: bigint
}

export type BatchOutcome =
  | BatchVerified
  /** Refused: the 402's reason; `channel` set for the scheme's corrective 402. */
  | { ok: false; reason: string; channel?: ChannelView | null }
  /** A refund done: answered at once with its receipt, nothing forwarded. */
  | { ok: 'answered'; receipt: string; body: string }

function configError(deps: BatchDeps, c: ChannelConfig): string | null {
  // Lower-case comparisons: checksumming (a keccak each) is not needed to compare addresses.
  const treasury = deps.treasury.toLowerCase()
  if (c.receiver.toLowerCase() !== treasury) return BATCH_ERR.receiver
  if (c.receiverAuthorizer.toLowerCase() !== treasury) return BATCH_ERR.receiverAuthorizer
  if (c.token.toLowerCase() !== deps.usdc.toLowerCase()) return BATCH_ERR.token
  if (c.withdrawDelay !== BATCH_WITHDRAW_DELAY_S) return BATCH_ERR.withdrawDelay
  if (BigInt(c.payerAuthorizer) === 0n) return BATCH_ERR.signature
  return null
}

// Checksummed payer addresses (a keccak each), for the call rows and receipts of every voucher.
const addresses = new Map<string, Address>()
function checksummed(address: string): Address {
  const key = address.toLowerCase()
  let out = addresses.get(key)
  if (out === undefined) {
    out = getAddress(key)
    if (addresses.size >= CHANNEL_IDS_MAX) addresses.clear()
    addresses.set(key, out)
  }
  return out
}

// Channel ids by config: hashing the config (EIP-712) per call would cost more than the rest of the call.
// Bounded: cleared when full (a process sees few live channels; a flood of made-up configs only churns it).
const channelIds = new Map<string, string>()
const CHANNEL_IDS_MAX = 100_000

function channelIdFor(config: ChannelConfig, chainId: number): string {
  const key =
    `${chainId}|${config.payer}|${config.payerAuthorizer}|${config.receiver}|${config.receiverAuthorizer}|${config.token}|${config.withdrawDelay}|${config.salt}`.toLowerCase()
  let id = channelIds.get(key)
  if (id === undefined) {
    id = channelIdOf(config, chainId).toLowerCase()
    if (channelIds.size >= CHANNEL_IDS_MAX) channelIds.clear()
    channelIds.set(key, id)
  }
  return id
}

/**
 * Everything a voucher must satisfy before its channel is asked: network, config, channel id, signature. The
 * signature: a hand-built EIP-712 digest and one native secp256k1 recovery (src/chain/recover-authorization.ts),
 * no RPC; a high-s signature is refused as the channel contract refuses it (its claim would revert).
 */
async function checkVoucher(deps: BatchDeps, p: BatchPayment): Promise<string | null> {
  if (p.accepted.network !== deps.caip2) return BATCH_ERR.network
  const config = p.payload.channelConfig as ChannelConfig
  const err = configError(deps, config)
  if (err) return err
  const channelId = p.payload.voucher.channelId.toLowerCase()
  if (channelIdFor(config, deps.chainId) !== channelId) return BATCH_ERR.channelId
  const signature = p.payload.voucher.signature as Hex
  if (signature.length !== 132 || BigInt(`0x${signature.slice(66, 130)}`) > HALF_N) return BATCH_ERR.signature
  let digest: Uint8Array
  try {
    digest = voucherDigestBytes(deps.chainId, channelId as Hex, BigInt(p.payload.voucher.maxClaimableAmount))
  } catch {
    return BATCH_ERR.signature
  }
  const signer = await recoverSigner(digest, signature)
  if (signer === null || signer !== config.payerAuthorizer.toLowerCase()) return BATCH_ERR.signature
  return null
}

/** Half the secp256k1 order: the contract refuses the high-s twin of a signature. */
const HALF_N = 0x7fffffffffffffffffffffffffffffff5d576e7357a4501ddfe92f46681b20a0n

/**
 * Decides one batch-settlement payment for an endpoint at `price`. `varies`: the price is a ceiling and the
 * call is charged what it measured when its answer ends; its receipt then says nothing is charged yet (the
 * client's next voucher is corrected by the scheme's 402, which carries the charged cumulative).
 */
export async function decideBatch(
  deps: BatchDeps,
  p: BatchPayment,
  price: bigint,
  varies = false,
): Promise<BatchOutcome> {
  const bad = await checkVoucher(deps, p)
  if (bad) return { ok: false, reason: bad }
  const channelId = p.payload.voucher.channelId.toLowerCase()
  const cumulative = BigInt(p.payload.voucher.maxClaimableAmount)
  const payload = p.payload
  if (payload.type === 'refund') return refund(deps, p, channelId, cumulative)
  if (payload.type === 'deposit') {
    const deposited = await deposit(deps, p, channelId)
    if (deposited) return { ok: false, reason: deposited }
  }
  const decision = await deps.leases.accept({
    channelId,
    cumulative,
    price,
    signature: payload.voucher.signature,
    // A deposit just confirmed: the lease's balance is read again.
    refresh: payload.type === 'deposit',
    varies,
  })
  if (!decision.ok) return refusal(decision.reason, decision.view)
  const channel = payload.channelConfig as ChannelConfig
  return {
    ok: true,
    kind: 'batch',
    proofKey: batchProofKey(channelId, cumulative),
    payer: checksummed(channel.payer),
    valueAtomic: price,
    transaction: null,
    receipt: receiptHeader(deps, {
      payer: channel.payer,
      channelId,
      chargedAmount: varies ? 0n : price,
      charged: varies ? cumulative - price : cumulative,
    }),
    lease: decision.lease,
    channelId,
    cumulative,
  }
}

/**
 * A WebSocket session's next voucher (sent on the socket): checked as any voucher, on the session's own
 * channel, then added to the voucher the session holds in flight. A deposit is not taken here (the channel's
 * balance must already cover it).
 */
export async function extendBatch(
  deps: BatchDeps,
  p: BatchPayment,
  held: { lease: Lease; channelId: string },
  price: bigint,
): Promise<{ ok: true; cumulative: bigint; receipt: string } | { ok: false; reason: string }> {
  if (p.payload.type !== 'voucher') return { ok: false, reason: BATCH_ERR.payload }
  const bad = await checkVoucher(deps, p)
  if (bad) return { ok: false, reason: bad }
  if (p.payload.voucher.channelId.toLowerCase() !== held.channelId)
    return { ok: false, reason: BATCH_ERR.channelId }
  const cumulative = BigInt(p.payload.voucher.maxClaimableAmount)
  const done = deps.leases.extend(held.lease, { cumulative, price, signature: p.payload.voucher.signature })
  if (done !== 'ok') return { ok: false, reason: REFUSALS[done] }
  return {
    ok: true,
    cumulative,
    receipt: sessionReceipt(deps, p.payload.channelConfig.payer, held.channelId, price, cumulative),
  }
}

/**
 * The receipt of a voucher a session holds: its whole increment charged for now (the published client's
 * next voucher then builds on it); the session's measured charge is settled when it ends, and the client
 * resyncs from the scheme's corrective 402 on its next call.
 */
export function sessionReceipt(
  deps: BatchDeps,
  payer: string,
  channelId: string,
  price: bigint,
  cumulative: bigint,
): string {
  return receiptHeader(deps, { payer, channelId, chargedAmount: price, charged: cumulative })
}

const REFUSALS = {
  not_found: BATCH_ERR.notFound,
  busy: BATCH_ERR.busy,
  in_flight: BATCH_ERR.busy,
  exceeds_balance: BATCH_ERR.exceedsBalance,
  below: BATCH_ERR.belowClaimed,
  mismatch: BATCH_ERR.mismatch,
} as const

function refusal(reason: keyof typeof REFUSALS, view?: ChannelView): BatchOutcome {
  // Only the scheme's corrective reasons carry the channel state (the client resyncs from it).
  if (reason === 'below' || reason === 'mismatch')
    return { ok: false, reason: REFUSALS[reason], channel: view }
  return { ok: false, reason: REFUSALS[reason] }
}

/** Queues the deposit for the leader and waits for it on chain; null when confirmed, else the reason. */
async function deposit(deps: BatchDeps, p: BatchPayment, channelId: string): Promise<string | null> {
  if (p.payload.type !== 'deposit') return null
  const config = p.payload.channelConfig as ChannelConfig
  const auth = p.payload.deposit.authorization.erc3009Authorization
  const amount = BigInt(p.payload.deposit.amount)
  // The ERC-3009 nonce the collector will use: one op per authorization, so a replay credits nothing twice.
  const nonce = keccak256(
    encodeAbiParameters([{ type: 'bytes32' }, { type: 'uint256' }], [channelId as Hex, BigInt(auth.salt)]),
  )
  const op = await requestChannelOp(deps.sql, {
    id: nonce,
    channelId,
    config,
    payer: getAddress(config.payer),
    kind: 'deposit',
    amount,
    calldata: depositCalldata(config, amount, erc3009CollectorData(auth as never)),
  })
  const done = await waitForOp(deps, op.id)
  return done === 'done' ? null : BATCH_ERR.deposit
}

async function refund(
  deps: BatchDeps,
  p: BatchPayment,
  channelId: string,
  cumulative: bigint,
): Promise<BatchOutcome> {
  // Every voucher accepted on the channel is written first, and no instance holds it while the refund is
  // queued (requestRefundOp's precondition): the amount is read from complete books.
  const held = await deps.leases.letGo(channelId)
  if (held === 'not_found') return { ok: false, reason: BATCH_ERR.notFound }
  if (held === 'busy') return { ok: false, reason: BATCH_ERR.busy }
  const channel = await findChannel(deps.sql, channelId)
  if (channel === null) return { ok: false, reason: BATCH_ERR.notFound }
  if (cumulative !== channel.charged_atomic) return { ok: false, reason: BATCH_ERR.mismatch, channel }
  const available = channel.balance_atomic - channel.charged_atomic
  const requested = p.payload.type === 'refund' && p.payload.amount ? BigInt(p.payload.amount) : available
  const amount = requested < available ? requested : available
  if (amount <= 0n) return { ok: false, reason: BATCH_ERR.refundNoBalance }
  const op = await requestRefundOp(deps.sql, {
    id: `refund:${channelId}:${channel.refunded_atomic}:${cumulative}`,
    channelId,
    cumulative,
    amount,
  })
  if (op === null) return { ok: false, reason: BATCH_ERR.busy }
  const status = await waitForOp(deps, op.id)
  const after = await findChannelOp(deps.sql, op.id)
  if (status !== 'done' || after === null) return { ok: false, reason: BATCH_ERR.refund }
  const now = await findChannel(deps.sql, channelId)
  const receipt = {
    success: true,
    transaction: after.tx_hash ?? '',
    network: deps.caip2,
    payer: getAddress(p.payload.channelConfig.payer),
    amount: (after.done_atomic ?? 0n).toString(),
    extra: {
      channelState: {
        channelId,
        balance: (now?.balance_atomic ?? 0n).toString(),
        totalClaimed: (now?.claimed_atomic ?? 0n).toString(),
        withdrawRequestedAt: 0,
        refundNonce: '0',
        chargedCumulativeAmount: (now?.charged_atomic ?? 0n).toString(),
      },
    },
  }
  return {
    ok: 'answered',
    receipt: Buffer.from(JSON.stringify(receipt)).toString('base64'),
    body: JSON.stringify({ message: 'Refund acknowledged', channelId, refunded: receipt.amount }),
  }
}

/** Polls the op's row (the leader may be another instance) until it is done or failed, or the wait ends. */
async function waitForOp(deps: BatchDeps, id: string): Promise<'done' | 'failed' | 'timeout'> {
  const deadline = Date.now() + deps.opWaitMs
  for (;;) {
    const op = await findChannelOp(deps.sql, id)
    if (op?.status === 'done' || op?.status === 'failed') return op.status
    if (Date.now() > deadline) return 'timeout'
    await new Promise((r) => setTimeout(r, 50))
  }
}

function receiptHeader(
  deps: BatchDeps,
  q: { payer: string; channelId: string; chargedAmount: bigint; charged: bigint },
): string {
  const settle = {
    success: true,
    transaction: '',
    network: deps.caip2,
    payer: checksummed(q.payer),
    amount: '',
    extra: {
      chargedAmount: q.chargedAmount.toString(),
      channelState: { channelId: q.channelId, chargedCumulativeAmount: q.charged.toString() },
    },
  }
  return Buffer.from(JSON.stringify(settle)).toString('base64')
}

/**
 * The PAYMENT-REQUIRED header of a refused batch payment: the endpoint's own, with the reason and, for the
 * scheme's corrective 402, the channel's charged cumulative and the voucher signature that proves it.
 */
export function batchRequiredHeader(base64: string, reason: string, channel?: ChannelView | null): string {
  const required = JSON.parse(Buffer.from(base64, 'base64').toString('utf8')) as {
    error?: string
    accepts: Array<{ scheme: string; extra?: Record<string, unknown> }>
  }
  required.error = reason
  if (channel) {
    for (const a of required.accepts) {
      if (a.scheme !== BATCH_SCHEME) continue
      a.extra = {
        ...a.extra,
        channelState: {
          channelId: channel.channel_id,
          balance: channel.balance_atomic.toString(),
          totalClaimed: channel.claimed_atomic.toString(),
          withdrawRequestedAt: 0,
          refundNonce: '0',
          chargedCumulativeAmount: channel.charged_atomic.toString(),
        },
        voucherState: {
          signedMaxClaimable: channel.signed_max_atomic.toString(),
          signature: channel.signature,
        },
      }
    }
  }
  return Buffer.from(JSON.stringify(required)).toString('base64')
}
