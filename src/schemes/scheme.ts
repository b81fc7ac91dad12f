// The one interface every way to pay implements, cut as @x402/evm cuts its exports: what a scheme offers in
// a 402 for an endpoint and a price (server side), how it reads and verifies a payment (facilitator verify),
// and, through the Payment it returns, what it claims in the books, how it settles and what its receipt
// says. The hot path (src/data-plane/metered.ts) only ever talks to this interface and to the registry.

import type { LRUCache } from 'lru-cache'
import type { BatchWriter } from '../books/batch-writer.ts'
import type { ChainContext } from '../chain/connect.ts'
import type { ChainInfo } from '../chain/info.ts'
import type { Sql } from '../db/sql.ts'
import type { ErrorCode } from '../errors.ts'
import type { CallAgent } from '../identity/call-agent.ts'
import type { ReadinessCheck } from '../observability/admin.ts'
import type { Logger } from '../observability/logger.ts'
import type { UsageRecord } from '../pricing/model.ts'
import type { Challenge, Offer, Requirement } from '../wire/challenge.ts'
import type { Proof } from '../wire/proof.ts'
import type { SchemeSettings } from './settings.ts'
import type { Verifier } from './verifier.ts'

// The 402's parts are declared with the 402 (challenge.ts); a scheme builds them.
export type { Offer, Requirement }

/** What a scheme is built from: the shared hot-path parts. A scheme takes what it needs and ignores the rest. */
export interface SchemeDeps {
  sql: Sql
  /** What a scheme is told of the configuration, decided once (./settings.ts): never the whole Config. */
  settings: SchemeSettings
  chain: ChainContext
  chainInfo: ChainInfo
  logger: Logger
  /** The one proof verifier (shared with checkout). */
  verifier: Verifier
  /** Proofs seen spent on this instance: refused without a query. */
  usedProofs: LRUCache<string, true>
  /** Claims and captures, group-committed together. */
  books: BatchWriter
  /** The x402 intake throttle (settlement backlog); read synchronously. */
  settlementThrottle?: {
    readonly engaged: boolean
    readonly code: 'settlement_backlog' | 'settlement_halted'
    readonly retryAfterS: number
  }
  /** The embedded single-session database (no advisory locks between processes): slots by worker index. */
  embedded?: boolean
  /** This data-plane process's index among its machine's workers (0 alone). */
  workerIndex?: number
}

/** What the 402 of one endpoint at one price is built from. */
export interface OfferQuery {
  /** The price, or the ceiling when the amount varies (base units). */
  amountAtomic: bigint
  /** The charge is measured after the call (usage pricing): only schemes that settle for less may offer. */
  varies: boolean
  maxTimeoutSeconds: number
  /** Schemes the endpoint's owner turned on explicitly (opt-in schemes look here). */
  enabled: ReadonlySet<string>
  /**
   * The payment protocols the endpoint answers besides a transaction hash ('x402', 'mpp'); absent: both.
   * The registry leaves out the parts of a protocol that is off (a scheme need not look).
   */
  protocols?: ReadonlySet<string>
}

/** Not offered here, and why (said in the 402: a client should not try it). */
export interface NotOffered {
  notOffered: string
}

/** One price of an endpoint (a fixed price, a rule's, or a usage ceiling) with its 402. */
export interface Quote {
  /** The price, or the ceiling when the amount varies (base units). */
  amountAtomic: bigint
  /** A lower price quoted within quote_ttl_ms, still accepted until floorUntilMs; or null. */
  floorAtomic: bigint | null
  floorUntilMs: number
  varies: boolean
  challenge: Challenge
}

/**
 * A genuine payment already spent (proof_already_used): the key it was claimed under and its payer, as the
 * scheme verified them (null: a transaction hash seen spent before its lookup, which names its payer
 * itself). What it bought may be named again to whoever resends it: a pass purchase retried (its answer
 * was lost) gets the same pass (src/data-plane/pass-purchase.ts).
 */
export interface SpentProof {
  proofKey: string
  payer: `0x${string}` | null
}

/** What the payment must cover for this request. */
export interface PayQuery {
  endpoint: {
    id: string
    accountId: string
    timeoutMs: number
    /** The endpoint asks for its payment to be settled before the answer (schemes that can, do). */
    settleBeforeAnswer?: boolean
    /** The payment protocols it accepts besides a transaction hash; absent: both (the registry refuses the others). */
    protocols?: ReadonlySet<string>
  }
  quote: Quote
  nowMs: number
  /** The client's rate-limit key ('' when limits are off): bounds its chain look-ups in flight. */
  client: string
}

/** A payment header read and verified (or refused) by its scheme. Expected failures are values. */
export type Verdict =
  | { ok: true; payment: Payment }
  /** 402 with a wire reason; `requiredHeader` replaces the PAYMENT-REQUIRED header (a scheme's corrective 402). */
  | { ok: false; reason: string; retryAfterMs?: number; requiredHeader?: string; spent?: SpentProof }
  /** 503: a dependency could not answer (chain, database); the same payment may be retried. */
  | { ok: 'unavailable'; message: string; reason: string; err?: unknown }
  /** An error answer of the registry (src/errors.ts), e.g. settlement_backlog with its Retry-After. */
  | { ok: 'error'; code: ErrorCode; message?: string; retryAfterS?: number }
  /** The scheme answered the request itself (nothing forwarded), e.g. a channel refund. */
  | { ok: 'answered'; status: string; headers: Array<[string, string]>; body: string; reason: string }

/**
 * insufficient_funds: x402 exact or upto, the payer's balance does not cover it (upto: its maximum) on top of
 * its unsettled authorizations and permits (the payer reservation).
 */
export type ClaimOutcome = 'won' | 'busy' | 'used' | 'insufficient_funds'

/** The facts of a call, for its row in the books. */
export interface CallFacts {
  endpointId: string
  accountId: string
  ownerWallet: string
  method: string
  /** How the endpoint priced it. */
  pricingModel: 'fixed' | 'rules' | 'usage'
}

/** A call the upstream served (status below 500): booked for `chargeAtomic`. */
export interface ServedCall extends CallFacts {
  callId: string
  status: number
  /** What the call costs: the price, or the measured usage charge (never above what the payment covers). */
  chargeAtomic: bigint
  /** The measured usage, for usage-priced endpoints; null for fixed prices. */
  usage: UsageRecord | null
  /** The receipt id the answer carried. */
  receiptId: string | null
  /** What a body-priced call bought (the MCP tool a `tools/call` named); null otherwise. */
  tool?: string | null
  /** An endpoint with identity rules: who called and the rule that priced it; null otherwise. */
  agent?: CallAgent | null
}

/**
 * One verified payment, held by one request. The request calls, in order: claim() once; then exactly one
 * of capture() (served), release() (certainly not served), doubt() (forwarded, outcome unknown); or
 * drop() when it left before claiming.
 */
export interface Payment {
  /** The scheme's name as it appears on the wire and in the books. */
  readonly scheme: string
  /** Globally unique key of what pays (a hash, a nonce, a voucher increment). */
  readonly proofKey: string
  readonly payer: `0x${string}`
  /** The most this payment covers (base units): a usage charge is capped here. */
  readonly coversAtomic: bigint
  /** The on-chain transaction that paid, when known now. */
  readonly transaction: string | null
  /** Holds the payment before the upstream is called: once across instances. */
  claim(): ClaimOutcome | Promise<ClaimOutcome>
  /** Verified but never claimed nor forwarded (the client left): nothing to undo but the scheme's own hold. */
  drop(): void
  /** Served: books the call for its charge (queued; the answer does not wait). */
  capture(call: ServedCall): void
  /** Certainly not served (upstream unreachable or 5xx, or never forwarded): may be retried. */
  release(): void
  /** Forwarded, outcome unknown: never served again; its scheme decides what it costs at the end of its window. */
  doubt(call: CallFacts): void
  /** The receipt header this answer carries; `served`: the upstream answered below 500. */
  receipt(served: boolean): [string, string] | null
  /**
   * Only for schemes that settle before the answer (when configured): called after capture(), it settles
   * the payment and resolves with the receipt header naming its transaction; the head waits for it. Never
   * rejects. Absent, or null: receipt() is the answer's.
   */
  settleBeforeAnswer?(): Promise<[string, string]> | null
  /**
   * True when capture() will settle before the answer: a usage-priced call (captured at its body's end) holds
   * its answer whole until settleBeforeAnswer() resolves.
   */
  readonly settlesEarly?: boolean
  /**
   * After capture(), once the answer was delivered whole: puts what it delivered (hex SHA-256 of the body as
   * sent, its length) on the call row, if the capture is not written yet. False (or absent): the caller
   * records the delivery apart.
   */
  deliver?(bodySha256: string, bodyBytes: number): boolean
  /**
   * Opening a WebSocket session, before the 101: the payment's own way to be topped up on the socket, or
   * null (absent: each top-up is a payment of its own, claimed and captured apart).
   */
  sessionFunds?(): SessionFunds | null
}

/** A further proof sent on an open WebSocket session (docs/websockets.md), as its scheme decided it. */
export type TopUpOutcome =
  | { ok: true; addedAtomic: bigint; receipt: [string, string] | null }
  | { ok: false; reason: string; requiredHeader?: string }

/**
 * A payment that pays a WebSocket session as it goes (a channel's vouchers): the session stays one call,
 * and each further proof on the socket adds to what the payment covers.
 */
export interface SessionFunds {
  /** The receipt header of the 101: what the session holds of the payment until it ends. */
  receipt(): [string, string] | null
  /** A further proof on the open socket: adds to coversAtomic, or is refused (the session goes on). */
  topUp(proof: Proof, q: PayQuery): Promise<TopUpOutcome>
}

/** A way to pay. Adding one is a folder under src/schemes/ and one line in src/schemes/index.ts. */
export interface Scheme {
  readonly name: string
  /** Its part of the 402 for one endpoint and price; null when silently not offered; NotOffered to say why. */
  offer(q: OfferQuery): Offer | NotOffered | null
  /** Whether a payment header is this scheme's (cheap and synchronous: nothing verified yet). */
  reads(proof: Proof): boolean
  /** Reads and verifies the payment for this request: the amount must cover `q.quote`. */
  verify(proof: Proof, q: PayQuery): Verdict | Promise<Verdict>
  /** Writes what it holds in memory (tests; shutdown drains through stop). */
  flush?(): Promise<void>
  stop?(): Promise<void>
  /** Checks /readyz runs for it (e.g. the exact settler's gas). */
  readonly readiness?: readonly ReadinessCheck[]
}

/** Builds a scheme from the shared parts; null when it cannot be offered by this process (logged by it). */
export type SchemeFactory = (deps: SchemeDeps) => Scheme | null | Promise<Scheme | null>
