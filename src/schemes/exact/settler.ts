// This process's settler for settle-before-answer: a slot claimed in the database (src/db/settler-slots.ts),
// its key derived from one secret (src/chain/settler-keys.ts), and a watch on its gas: a gauge per slot, a
// /readyz check that fails below settlement.before_answer.gas_floor_eth (before it runs dry), and on the
// local dev chain a top-up (derived keys start empty there). No slot free: null, the calls settle after.
import { formatEther, type Hex, parseEther } from 'viem'
import { fundDevGas } from '../../chain/dev-chain.ts'
import { settlerSlotKey } from '../../chain/settler-keys.ts'
import { claimSettlerSlot, type SettlerSlot } from '../../db/settler-slots.ts'
import type { ReadinessCheck } from '../../observability/admin.ts'
import { settlerBalance, settlerBalanceFloor } from '../../observability/metrics.ts'
import type { SchemeDeps } from '../scheme.ts'
import { SettleBeforeAnswer } from './settle-before-answer.ts'

/** What the dev chain gives a settler slot that fell below its floor (anvil ETH, worth nothing). */
const DEV_TOP_UP_WEI = parseEther('10')

/** How often the slot's database session is checked alive (and, once lost, the slot claimed again). */
const SLOT_KEEPALIVE_MS = 5_000

export interface EarlySettler {
  early: SettleBeforeAnswer
  slot: number
  /** False while the slot's lock is lost: the calls settle after meanwhile. */
  usable(): boolean
  readiness: ReadinessCheck
  stop(): Promise<void>
}

const settlers = new WeakMap<SchemeDeps, Promise<EarlySettler | null>>()

/**
 * The process's one settler, shared by the schemes that settle before the answer (exact and upto send from
 * the same slot: one nonce sequence). Started by the first to ask; `exact` stops it.
 */
export function sharedSettler(deps: SchemeDeps): Promise<EarlySettler | null> {
  let settler = settlers.get(deps)
  if (settler === undefined) {
    settler = startSettler(deps)
    settlers.set(deps, settler)
  }
  return settler
}

export async function startSettler(deps: SchemeDeps): Promise<EarlySettler | null> {
  const { settings, logger, chain } = deps
  const o = settings.settlement?.beforeAnswer
  if (!o) return null
  const seed = settings.settlerSeed
  if (seed === null) {
    logger.warn('x402 exact: no key to derive a settler from; every endpoint settles after the call')
    return null
  }
  let settler: SettleBeforeAnswer | null = null
  const claimed = await claimSettlerSlot(deps.sql, {
    embedded: deps.embedded ?? true,
    workerIndex: deps.workerIndex ?? 0,
    slots: o.slots,
    keepaliveMs: SLOT_KEEPALIVE_MS,
    onLost: (err) => {
      logger.error('settler slot lost with its database session; calls settle after until it is back', {
        err,
      })
    },
    onRegained: () => {
      settler?.forgetNonce()
      logger.info('settler slot held again; settling before the answer')
    },
  })
  if (claimed === null) {
    logger.warn(
      `x402 exact: all ${o.slots} settler slots are held by other processes (settlement.before_answer.slots); this process settles after the call, with pending receipts`,
    )
    return null
  }
  const key = settlerSlotKey(seed, claimed.slot) as Hex
  const early = new SettleBeforeAnswer({
    sql: deps.sql,
    books: deps.books,
    chain,
    logger,
    settlerKey: key,
    windowMs: o.windowMs,
    waitMs: o.waitMs,
    processes: o.processes,
    perTransaction: settings.settlement.perTransaction,
  })
  settler = early
  const gas = new GasWatch(deps, claimed, early.address, o)
  early.onMined = () => gas.soon()
  await gas.check()
  logger.info('x402 exact: settling before the answer', {
    settler: early.address,
    slot: claimed.slot,
    by_default: settings.settlement.beforeAnswerByDefault,
  })
  return {
    early,
    slot: claimed.slot,
    usable: () => claimed.held(),
    readiness: {
      name: 'x402_settler',
      // A lost slot does not fail readiness: the process still serves (pending receipts) and takes the slot
      // again when the database is back. Gas running out is the operator's to fix, so it does.
      check: () => gas.readiness(),
    },
    async stop() {
      gas.stop()
      await early.stop()
      await claimed.release()
    },
  }
}

class GasWatch {
  private readonly floorWei: bigint
  private readonly label: { slot: string }
  private balanceWei: bigint | null = null
  private lastMs = 0
  private pending: Promise<void> | null = null
  private readonly timer: NodeJS.Timeout

  constructor(
    private readonly deps: SchemeDeps,
    slot: SettlerSlot,
    private readonly address: Hex,
    private readonly o: { gasFloorEth: number; gasCheckMs: number },
  ) {
    this.floorWei = parseEther(String(o.gasFloorEth))
    this.label = { slot: String(slot.slot) }
    settlerBalanceFloor.set(this.label, o.gasFloorEth)
    this.timer = setInterval(() => void this.check(), o.gasCheckMs)
    this.timer.unref()
  }

  /** After a mined transaction: read again if the last read is older than gas_check_ms. */
  soon(): void {
    if (performance.now() - this.lastMs >= this.o.gasCheckMs) void this.check()
  }

  /** Reads the balance (one at a time); a failed read keeps the last value. */
  check(): Promise<void> {
    this.pending ??= this.read().finally(() => {
      this.pending = null
    })
    return this.pending
  }

  private async read(): Promise<void> {
    this.lastMs = performance.now()
    const client = this.deps.chain.publicClient
    try {
      let wei = await client.getBalance({ address: this.address })
      if (wei < this.floorWei && this.deps.settings.devChain) {
        // The dev chain's derived settler keys start with nothing: give them anvil ETH.
        await fundDevGas(client as never, this.address, DEV_TOP_UP_WEI)
        wei = await client.getBalance({ address: this.address })
      }
      this.balanceWei = wei
      settlerBalance.set(this.label, Number(formatEther(wei)))
    } catch (err) {
      this.deps.logger.warn('settler balance read failed', { err, settler: this.address })
    }
  }

  async readiness(): Promise<{ ok: boolean; detail?: string }> {
    if (this.balanceWei === null) await this.check()
    const wei = this.balanceWei
    if (wei === null) return { ok: false, detail: `settler ${this.address} balance unknown` }
    if (wei < this.floorWei)
      return {
        ok: false,
        detail: `settler ${this.address} (slot ${this.label.slot}) holds ${formatEther(wei)} ETH, below gas_floor_eth ${this.o.gasFloorEth}: fund it`,
      }
    return { ok: true }
  }

  stop(): void {
    clearInterval(this.timer)
    settlerBalance.remove(this.label)
    settlerBalanceFloor.remove(this.label)
  }
}
