// The facilitator's claims, group-committed: the /settle requests of this process that claim while the
// previous group's transaction is in flight go together in the next one (claimFacilitatorPayments: one
// transaction, one statement a payload), so under load a claim costs a share of one commit instead of a
// transaction of its own. Idle, a claim goes at once (no added wait). A group that fails as a whole (a
// deadlock with another instance's group, a lost connection) is claimed again one payload a transaction,
// so one payload's error stays its own.
import {
  claimFacilitatorPayments,
  type FacilitatorClaim,
  type FacilitatorClaimRequest,
} from '../books/facilitator.ts'
import type { Sql } from '../db/sql.ts'

/** At most this many claims a transaction: the payers' locks are held until its commit. */
const GROUP_MAX = 64

interface Pending {
  request: FacilitatorClaimRequest
  resolve(claim: FacilitatorClaim): void
  reject(err: unknown): void
}

export class FacilitatorClaims {
  private queue: Pending[] = []
  private running = false

  constructor(private readonly sql: Sql) {}

  claim(request: FacilitatorClaimRequest): Promise<FacilitatorClaim> {
    return new Promise((resolve, reject) => {
      this.queue.push({ request, resolve, reject })
      if (!this.running) void this.drain()
    })
  }

  private async drain(): Promise<void> {
    this.running = true
    try {
      while (this.queue.length > 0) {
        const group = this.queue.splice(0, GROUP_MAX)
        await this.commit(group)
      }
    } finally {
      this.running = false
    }
  }

  private async commit(group: Pending[]): Promise<void> {
    try {
      const claims = await claimFacilitatorPayments(
        this.sql,
        group.map((p) => p.request),
      )
      for (const [i, p] of group.entries()) p.resolve(claims[i]!)
      return
    } catch (err) {
      if (group.length === 1) {
        group[0]!.reject(err)
        return
      }
    }
    // The group rolled back whole: each payload alone, its own error its own.
    await Promise.all(
      group.map((p) =>
        claimFacilitatorPayments(this.sql, [p.request]).then(
          ([claim]) => p.resolve(claim!),
          (err) => p.reject(err),
        ),
      ),
    )
  }
}
