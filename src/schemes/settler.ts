// The settle side of a scheme whose payments are collected after the call, cut as @x402/evm keeps
// exact/facilitator beside exact/client: what to list and sign, how to read a mined transaction's outcome
// for each payment, and which books transition applies. The one pipeline that runs every such scheme (steps,
// the treasury lock, nonce order, hashes recorded before broadcast, receipts, lost transactions) is
// src/control-plane/jobs/settle-after-call.ts; a scheme says only what is its own.
import type { Counter, Histogram } from 'prom-client'
import type { Hash, Hex, TransactionReceipt } from 'viem'
import type { SettlementPlace } from '../books/settlement.ts'
import type { ChainContext } from '../chain/connect.ts'
import type { FeeQuote } from '../chain/payouts.ts'
import type { Sql } from '../db/sql.ts'
import type { Logger } from '../observability/logger.ts'
import type { SchemeSettings } from './settings.ts'

/** One unsettled claim, as its scheme's books list it. */
export interface SettlementItem {
  proof_key: string
  settlement_tx: string | null
}

/**
 * What became of one payment: settled (`done` is what the books transition takes), failed for good (the call
 * stays unpaid), or not attempted (its recorded hash is forgotten and it is signed again).
 */
export type Resolution<D> = { settled: D } | { failed: string } | 'unattempted'

export interface Settler<C extends SettlementItem = SettlementItem, D = unknown> {
  /** The background job's name (tests run it by name). */
  readonly job: string
  /** How its logs name it ('x402', 'x402 upto'). */
  readonly label: string
  /** The /readyz check of its backlog, and what its deadline is called there. */
  readonly readinessName: string
  readonly deadlineName: string
  /** Outcomes per payment: settled, expired, reverted, broadcast_failed, receipt_error, lost, unattempted, … */
  readonly outcomes: Counter<'outcome'>
  /** Payments broadcast together per step, where the scheme keeps that measure. */
  readonly stepSize?: Histogram
  /**
   * A transaction pooled long behind a gap in its sender's nonces counts as lost and is signed again. Only
   * where a payment spent by another transaction is still found and booked (a second transaction for it
   * reverts, and the first one's money must not be taken for nothing).
   */
  readonly lostBehindGap: boolean

  /** Unsettled payments and the soonest deadline among them (seconds), for readiness. */
  backlog(): Promise<{ count: number; soonestS: number | null }>
  /** Payments not sent yet, soonest deadline first; captures younger than `capturedBeforeMs` may be left. */
  listDue(q: { limit: number; capturedBeforeMs: number }): Promise<C[]>
  /**
   * Payments whose transaction is recorded and whose outcome is not known, with their age; a scheme may
   * leave out captures younger than `capturedBeforeMs` (the settle-before-answer path's own, in flight).
   */
  listSent(q: { capturedBeforeMs: number }): Promise<Array<C & { age_ms: number }>>
  /** Records hashes and places before broadcast; returns the proof keys recorded (a claim that moved is left out). */
  record(txs: SettlementPlace[]): Promise<Set<string>>
  forget(q: { proofKey: string; hash: string }): Promise<boolean>
  fail(q: { proofKey: string; reason: string }): Promise<boolean>
  /** The books transition: marks them settled and books their revenue; returns how many it marked. */
  settle(done: D[]): Promise<number>

  /**
   * Before signing: what can never be sent fails (its reason), what needs no transaction the scheme books
   * itself, and the rest is sent.
   */
  triage(due: C[], nowS: bigint): Promise<{ send: C[]; failed: Array<[C, string]> }>
  /** The transactions to sign, each a group of payments in the order it carries them. */
  groups(send: C[]): Promise<C[][]>
  sign(items: C[], nonce: number, fees: FeeQuote): Promise<{ rawTx: Hex; hash: Hash }>
  /** Each payment's outcome in a mined transaction, in order. */
  read(items: C[], hash: Hash, receipt: TransactionReceipt): Promise<Array<Resolution<D>>>
  /** Each payment's outcome when its transaction was never mined and the node does not know it. */
  lost(items: C[], hash: Hash): Promise<Array<Resolution<D>>>
}

/** What a settle side is built from, on the leader. */
export interface SettlerDeps {
  sql: Sql
  chain: ChainContext
  logger: Logger
  settings: SchemeSettings
  /** Base of payment_url (a checkout's authorization settles with the calls'). */
  publicUrl(): string
}

export type SettlerFactory = (deps: SettlerDeps) => Settler
