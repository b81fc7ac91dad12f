// A payer using the published @x402/evm batch-settlement client with @x402/fetch, unpatched: it opens a
// channel with one deposit and pays each call with a cumulative voucher.
import { x402Client } from '@x402/core/client'
import { BatchSettlementEvmScheme } from '@x402/evm/batch-settlement/client'
import { wrapFetchWithPayment } from '@x402/fetch'
import { type Address, createPublicClient, http } from 'viem'
import { chainClients, type Funded } from './accounts.ts'

export function batchPayer(
  who: Funded,
  q: {
    caip2: `eip155:${number}`
    depositMultiplier: number
    /** A chain of the test's own (the chaos runs start theirs); by default the global setup's. */
    chain?: { rpcUrl: string; usdc: Address }
  },
) {
  const { rpcUrl, usdc } = q.chain ?? chainClients()
  const publicClient = createPublicClient({ transport: http(rpcUrl) })
  const signer = {
    address: who.address,
    signTypedData: (m: Parameters<typeof who.account.signTypedData>[0]) => who.account.signTypedData(m),
    readContract: (args: Parameters<typeof publicClient.readContract>[0]) => publicClient.readContract(args),
  }
  const scheme = new BatchSettlementEvmScheme(signer as any, {
    depositPolicy: { depositMultiplier: q.depositMultiplier },
  })
  // The test USDC is not one of the package's default assets: allowed explicitly, as a client would.
  const client = x402Client.fromConfig({
    schemes: [{ network: q.caip2, client: scheme }],
    spendControls: { allowedAssets: [{ network: q.caip2, asset: usdc }] },
  })
  // Keeps every payment header sent, for the replay tests.
  const sent: string[] = []
  const recording = (input: string | URL | Request, init?: RequestInit) => {
    // Read without constructing a Request from it: that would use up a POST body before it is sent.
    const h = (input instanceof Request ? input.headers : new Headers(init?.headers)).get('payment-signature')
    if (h) sent.push(h)
    return fetch(input, init)
  }
  return { fetch: wrapFetchWithPayment(recording, client), scheme, sent }
}
