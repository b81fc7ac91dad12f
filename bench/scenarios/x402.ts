// x402: each request carries a fresh EIP-3009 authorization, signed before the load by the published `x402`
// client (createPaymentHeader, the way an x402 agent pays), from the requirements tollgate's 402 announces.
import { type Chain, createWalletClient, type Hex, http, publicActions } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { baseSepolia } from 'viem/chains'
import { createPaymentHeader, selectPaymentRequirements } from 'x402/client'
import { PaymentRequirementsSchema } from 'x402/types'
import { load, type Measured } from '../load.ts'
import { type Context, settings } from './context.ts'
import { inside, readCounters, settlementOutcome } from './inside.ts'

/** `settleAfter`: an endpoint set to `"after"` (the leader's batch, pending receipts); else the default. */
export async function runX402(ctx: Context, count: number, settleAfter = false): Promise<Measured> {
  const url = await ctx.tollgates.warm!.metered('/data', { settleAfter })
  const r = await fetch(url)
  const body = (await r.json()) as { accepts: unknown[] }
  const accepts = body.accepts.map((a) => PaymentRequirementsSchema.parse(a))
  const requirements = selectPaymentRequirements(accepts, 'base-sepolia', 'exact')
  const signer = createWalletClient({
    account: privateKeyToAccount(ctx.chain.payers[0]!.privateKey as Hex),
    chain: { ...baseSepolia, id: ctx.chain.chainId } as Chain,
    transport: http(ctx.chain.rpcUrl),
  }).extend(publicActions)
  const started = performance.now()
  const headers: string[] = []
  for (let i = 0; i < count; i += 100) {
    headers.push(
      ...(await Promise.all(
        Array.from({ length: Math.min(100, count - i) }, () => createPaymentHeader(signer, 1, requirements)),
      )),
    )
  }
  process.stdout.write(
    `  signed ${count} x402 authorizations in ${Math.round(performance.now() - started)} ms\n`,
  )
  const before = await readCounters(ctx.tollgates.warm!.adminPort)
  const m = await load({
    url,
    connections: settings.connections,
    durationS: settings.durationS,
    perRequest: { header: 'x-payment', values: headers },
    expectStatus: 200,
  })
  const adminPort = ctx.tollgates.warm!.adminPort
  return {
    ...m,
    inside: inside(before, await readCounters(adminPort)),
    // Settling is the leader's work after the call; waited for once the CPU of the load is measured.
    afterLoad: async () => ({ settlement: await settlementOutcome(adminPort, before) }),
  }
}
