// The payment expiry sweeper: pending payments past expires_at become expired (payment.expired), and any
// partial amount they held is scheduled for refund. Runs on the leader only (once per database). Also the
// operator's list of unmatched inflows on the admin port (GET /unmatched-inflows).
import { expireDuePayments } from '../../books/payments.ts'
import { listUnmatchedInflows } from '../../db/payments.ts'
import { toDollars } from '../../money.ts'
import type { BackgroundModule, JobDeps } from './runner.ts'

export const PAYMENT_EXPIRY_JOB = 'payment-expiry'

export function createPaymentJobs(deps: JobDeps): BackgroundModule {
  return {
    jobs: [
      {
        name: PAYMENT_EXPIRY_JOB,
        intervalMs: deps.config.jobs.expiry_interval_ms,
        run: async () => {
          const expired = await expireDuePayments(deps.sql, {
            view: {
              publicUrl: deps.publicUrl(),
              network: deps.chain.network,
              chainId: deps.chain.chainId,
              treasury: deps.chain.treasury,
              usdcAddress: deps.chain.usdc.address,
            },
          })
          if (expired > 0) deps.logger.info('payments expired', { count: expired })
          return expired
        },
      },
    ],
    adminRoutes: {
      '/unmatched-inflows': async () => {
        const rows = await listUnmatchedInflows(deps.sql, { open: true, limit: 500 })
        return {
          status: 200,
          body: {
            object: 'list',
            data: rows.map((r) => ({
              transaction: r.tx_hash,
              payer: r.payer,
              amount: toDollars(r.amount_atomic),
              amount_atomic: r.amount_atomic.toString(),
              block_number: r.block_number.toString(),
              seen_at: r.seen_at.toISOString(),
            })),
          },
        }
      },
    },
  }
}
