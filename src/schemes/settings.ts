// What the schemes are told of the configuration, decided once from it: by the registry for the schemes of
// a data-plane process, by the settlement job for the settle sides. A scheme reads these settled values and
// never the whole Config, so what a scheme depends on is said here, in one place.
import { treasuryPrivateKey } from '../chain/connect.ts'
import type { DevChain } from '../chain/dev-chain.ts'
import type { SettlerSeed } from '../chain/settler-keys.ts'
import type { Config } from '../config/schema.ts'
import { settleBeforeAnswerUnavailable } from '../config/settle-before-answer.ts'
import { workerCount } from '../config/worker-count.ts'
import { configDollars } from '../money.ts'

export interface SchemeSettings {
  /** The local dev chain (anvil): contracts and gas are put in place, not deployed or bought. */
  devChain: boolean
  ownerShareBps: number
  /** A released payment may be sent again within this (its claim stays re-claimable). */
  retryWindowMs: number
  settlement: {
    /** Authorizations or permits one settlement transaction carries (where the chain holds the batcher). */
    perTransaction: number
    /** Claims listed per step of a settlement run. */
    batchMax: number
    intervalMs: number
    /** Readiness fails when the soonest deadline is closer than this. */
    readinessMarginS: number
    confirmations: number
    confirmTimeoutMs: number
    receiptPollMs: number
    /** How far back one log query reaches when an authorization's transaction is looked for (blocks). */
    logChunkBlocks: bigint
    /**
     * Captures younger than this are the settle-before-answer path's: it records its transaction on them
     * within that time (0 where the path does not exist: no secret to derive settler keys from).
     */
    earlyGapMs: number
    /** Endpoints that made no choice settle before the answer. */
    beforeAnswerByDefault: boolean
    beforeAnswer: {
      slots: number
      windowMs: number
      waitMs: number
      /** Data-plane processes on this machine, each with its settler and its share of the calls. */
      processes: number
      gasFloorEth: number
      gasCheckMs: number
    } | null
  }
  /** The keys settler slots are derived from; null: none, every call settles after. */
  settlerSeed: SettlerSeed | null
  batch: { leaseMs: number; flushMs: number; reserveAtomic: bigint }
  mpp: {
    secrets: { receipt_signing_key: string | null; treasury_private_key: string | null }
    publicUrl: string | null
  }
}

export function schemeSettings(config: Config, devChain: DevChain | null): SchemeSettings {
  const s = config.settlement
  const early = s.before_answer
  const settlerKey = config.secrets.settler_private_key ?? null
  const treasuryKey = settlerKey === null ? treasuryPrivateKey(config, devChain) : null
  return {
    devChain: config.chain.network === 'local',
    ownerShareBps: config.fees.owner_share_bps,
    retryWindowMs: config.proxy.retry_window_ms,
    settlement: {
      perTransaction: s.per_transaction,
      batchMax: s.batch_max,
      intervalMs: s.interval_ms,
      readinessMarginS: s.readiness_margin_s,
      confirmations: config.chain.confirmations,
      confirmTimeoutMs: s.confirm_timeout_ms,
      receiptPollMs: s.receipt_poll_ms,
      logChunkBlocks: BigInt(config.payouts.reconcile_block_chunk),
      earlyGapMs: settleBeforeAnswerUnavailable(config) === null ? early.window_ms + 2 * early.wait_ms : 0,
      beforeAnswerByDefault: early.enabled,
      beforeAnswer: {
        slots: early.slots,
        windowMs: early.window_ms,
        waitMs: early.wait_ms,
        processes: workerCount(config),
        gasFloorEth: early.gas_floor_eth,
        gasCheckMs: early.gas_check_ms,
      },
    },
    settlerSeed: settlerKey === null && treasuryKey === null ? null : { settlerKey, treasuryKey },
    batch: {
      leaseMs: config.x402.batch_lease_ms,
      flushMs: config.x402.batch_flush_ms,
      reserveAtomic: configDollars(config.x402.batch_reserve),
    },
    mpp: {
      secrets: {
        receipt_signing_key: config.secrets.receipt_signing_key ?? null,
        treasury_private_key: config.secrets.treasury_private_key ?? null,
      },
      publicUrl: config.server.public_url ?? null,
    },
  }
}
