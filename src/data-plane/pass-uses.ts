// A signed-in call on a pass: the SIGN-IN-WITH-X header checked (sign-in.ts), one use drawn in PostgreSQL
// (src/books/passes.ts), and handed to the hot path as a Payment, so it goes the way every paid call goes:
// forwarded, then captured (nothing to book: the purchase was the money), released (the use is given
// back: the upstream certainly did not serve it) or in doubt (the use stays drawn: never served twice).
import { randomBytes } from 'node:crypto'
import { LRUCache } from 'lru-cache'
import {
  type Draw,
  type DrawRequest,
  type DrawServed,
  drawPassUse,
  drawTimePassUses,
  findOwnDraw,
  giveBackPassUse,
  recordPassDrawServed,
  type TimedDraw,
} from '../books/passes.ts'
import { Grouped } from '../db/grouped.ts'
import type { Sql } from '../db/sql.ts'
import type { Logger } from '../observability/logger.ts'
import { passDraws } from '../observability/metrics.ts'
import type { CallFacts, ClaimOutcome, Payment, ServedCall, Verdict } from '../schemes/scheme.ts'
import type { SignIn } from './sign-in.ts'

export const PASS_SCHEME = 'pass'

const outcome = {
  drawn: passDraws.labels('drawn'),
  givenBack: passDraws.labels('given_back'),
  refused: passDraws.labels('refused'),
  replayed: passDraws.labels('replayed'),
  none: passDraws.labels('none'),
  unknown: passDraws.labels('unknown'),
  recovered: passDraws.labels('recovered'),
}

export interface PassUsesOptions {
  /** How long a draw or a give-back that failed in flight is retried in the background. */
  settleForMs: number
}

/** Served calls recorded in one statement at most. */
const SERVED_BATCH_MAX = 500
/** Draws on passes of time in one statement at most. */
const TIMED_GROUP_MAX = 200
/** Wallets remembered as drawing alone (a lost memory only costs a round trip). */
const ALONE_MAX = 10_000

export class PassUses {
  private readonly servedQueue: DrawServed[] = []
  private writingServed = false
  /**
   * The draws in flight together on passes of time share one statement (a statement a call was most of a
   * pass's cost: feature-pass in docs/benchmarks.md). A group whose statement failed fails each of its draws,
   * each then settled as a lone draw in doubt is, rather than run again alone: a group that committed before
   * its answer was lost would read as its own messages replayed.
   */
  private readonly timed = new Grouped<DrawRequest, TimedDraw>(
    (requests) => drawTimePassUses(this.sql, requests),
    TIMED_GROUP_MAX,
    { rerunAlone: false },
  )

  /** Wallets (endpoint and payer) whose last draw had no pass of time: they draw alone. */
  private readonly alone = new LRUCache<string, true>({ max: ALONE_MAX })

  constructor(
    private readonly sql: Sql,
    private readonly signIn: SignIn,
    private readonly logger: Logger,
    private readonly options: PassUsesOptions,
  ) {}

  /** Checks the sign-in and draws one use of the signer's pass on this endpoint: a Verdict, as a scheme's. */
  async use(header: string, endpoint: { id: string; resourceUrl: string }): Promise<Verdict> {
    const signedIn = await this.signIn.verify(header, endpoint.resourceUrl)
    if (signedIn.ok === 'unavailable')
      return {
        ok: 'unavailable',
        message: 'the wallet could not be asked on chain; retry shortly (sign in again)',
        reason: signedIn.reason,
      }
    if (!signedIn.ok) {
      outcome.refused.inc()
      return { ok: false, reason: signedIn.reason }
    }
    const request = {
      endpointId: endpoint.id,
      payer: signedIn.payer,
      nonce: signedIn.nonce,
      token: randomBytes(12).toString('hex'),
      nonceExpiresAt: signedIn.nonceExpiresAt,
    }
    let draw: Awaited<ReturnType<typeof drawPassUse>>
    try {
      draw = await this.draw(request)
    } catch (err) {
      // The statement may have committed before its answer was lost: find out once the database answers,
      // and give the use back if it did (nobody was served with it).
      outcome.unknown.inc()
      this.settleUnknown(request)
      return {
        ok: 'unavailable',
        message: 'the pass could not be read; retry shortly (sign in again)',
        reason: 'pass_draw_failed',
        err,
      }
    }
    if (!draw.ok) {
      if (draw.reason === 'replayed') {
        outcome.replayed.inc()
        // The spec's code for a nonce used before: a sign-in message serves once.
        return { ok: false, reason: 'invalid_siwx_nonce' }
      }
      outcome.none.inc()
      return { ok: false, reason: 'no_live_pass' }
    }
    outcome.drawn.inc()
    return {
      ok: true,
      payment: new PassUse(this, signedIn.payer, request.nonce, draw.usesLeft, draw.expiresMs),
    }
  }

  /**
   * A pass of time first, in the group's statement; a wallet without one draws alone (drawPassUse, which
   * looks for a pass of time first itself, then a counted pass under its lock). Which way the wallet's last
   * draw on the endpoint went is remembered, so a wallet on counted passes does not pay the group's round
   * trip before its own every call. The memory only picks the way: drawPassUse alone decides as the group
   * would (a pass of time bought since is still drawn on first), and a wrong guess costs a round trip.
   */
  private async draw(request: DrawRequest): Promise<Draw> {
    const wallet = `${request.endpointId}\n${request.payer}`
    if (this.alone.get(wallet) !== true) {
      const timed = await this.timed.submit(request)
      if (timed.ok || timed.reason !== 'no_time_pass') return timed
    }
    const draw = await drawPassUse(this.sql, request)
    // Drawn on a pass of time (no use counted): the group again next time.
    if (draw.ok && draw.usesLeft === null) this.alone.delete(wallet)
    else this.alone.set(wallet, true)
    return draw
  }

  /** Gives a drawn use back (the call was not served), retrying while the database does not answer. */
  giveBack(nonce: string): void {
    outcome.givenBack.inc()
    this.retry('give a pass use back', () => giveBackPassUse(this.sql, { nonce }).then(() => true))
  }

  /**
   * A drawn use's call was served: its receipt (the x-receipt-id the answer carried) is written on the draw,
   * after the answer (off the request's path), retried while the database does not answer. The calls served
   * while one statement is written go together in the next (a statement a call cost more than the draw).
   */
  served(nonce: string, call: ServedCall): void {
    const receiptId = call.receiptId
    if (receiptId === null) return
    this.servedQueue.push({ nonce, receiptId, upstreamStatus: call.status, method: call.method })
    if (!this.writingServed) this.writeServed()
  }

  private writeServed(): void {
    const batch = this.servedQueue.splice(0, SERVED_BATCH_MAX)
    this.writingServed = true
    this.retry(
      "record pass calls' receipts",
      () => recordPassDrawServed(this.sql, batch).then(() => true),
      'their receipt ids will answer 404',
      () => {
        this.writingServed = false
        if (this.servedQueue.length > 0) this.writeServed()
      },
    )
  }

  /** A draw whose answer was lost: if it committed, its use goes back. */
  private settleUnknown(q: { nonce: string; token: string; nonceExpiresAt: Date }): void {
    this.retry('settle a pass draw lost in flight', async () => {
      const own = await findOwnDraw(this.sql, q)
      if (own.kind === 'mine' && own.passId !== null && (await giveBackPassUse(this.sql, { nonce: q.nonce })))
        outcome.recovered.inc()
      return true
    })
  }

  /**
   * Runs `attempt` until it answers or settleForMs passes; then logs what `lost` says is lost. `ended` is
   * told once either way.
   */
  private retry(
    what: string,
    attempt: () => Promise<boolean>,
    lost = 'one pass use is lost',
    ended?: () => void,
  ): void {
    const deadline = Date.now() + this.options.settleForMs
    const run = (delayMs: number): void => {
      attempt().then(
        () => ended?.(),
        (err) => {
          if (Date.now() + delayMs > deadline) {
            // A use (or a receipt) lost to the payer, never money to the merchant: said, not retried for ever.
            this.logger.error(`could not ${what}; ${lost}`, { err })
            ended?.()
            return
          }
          setTimeout(() => run(Math.min(delayMs * 2, 2_000)), delayMs).unref()
        },
      )
    }
    run(100)
  }
}

/** A drawn use's pass end (epoch ms; null: never), or undefined when `payment` is not a pass use. */
export function passEndsMs(payment: Payment): number | null | undefined {
  return payment instanceof PassUse ? payment.expiresMs : undefined
}

/** One drawn use, held by one request. */
class PassUse implements Payment {
  readonly scheme = PASS_SCHEME
  readonly proofKey: string
  /** The purchase paid for it: the call itself moves no money. */
  readonly coversAtomic = 0n
  readonly transaction = null

  constructor(
    private readonly uses: PassUses,
    readonly payer: `0x${string}`,
    private readonly nonce: string,
    private readonly usesLeft: number | null,
    /** When the pass drawn on ends (epoch ms); null: never (a pass of calls only). */
    readonly expiresMs: number | null,
  ) {
    this.proofKey = `siwx:${nonce}`
  }

  /** Drawn already, in the verdict: the draw is the claim. */
  claim(): ClaimOutcome {
    return 'won'
  }

  drop(): void {
    this.uses.giveBack(this.nonce)
  }

  capture(call: ServedCall): void {
    this.uses.served(this.nonce, call)
  }

  release(): void {
    this.uses.giveBack(this.nonce)
  }

  /** Forwarded, outcome unknown: the use stays drawn. */
  doubt(_call: CallFacts): void {}

  receipt(served: boolean): [string, string] | null {
    if (!served) return null
    return ['x-pass-uses-left', this.usesLeft === null ? 'unlimited' : String(this.usesLeft)]
  }
}
