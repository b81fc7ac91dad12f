// The published x402 v2 pieces the tests drive tollgate with, unchanged: the exact EVM client wrapped around
// fetch, HTTPFacilitatorClient pointed at tollgate's facilitator with a merchant's key, and a merchant's own
// express server (the published middleware) listening on 127.0.0.1.
import type { Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { x402Client } from '@x402/core/client'
import { HTTPFacilitatorClient } from '@x402/core/server'
import { registerExactEvmScheme } from '@x402/evm/exact/client'
import { wrapFetchWithPayment } from '@x402/fetch'
import type { Address, Hex } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'

/** What the exact scheme signs with: a private key, or any account that signs typed data. */
export type ExactSigner = Hex | { address: Address; signTypedData: (message: never) => Promise<Hex> }

/** The published v2 client, unchanged: x402Client + the exact EVM scheme, and fetch paying with it. */
export function exactPayer(signer: ExactSigner): { client: x402Client; fetch: typeof fetch } {
  const client = new x402Client()
  const account = typeof signer === 'string' ? privateKeyToAccount(signer) : signer
  registerExactEvmScheme(client, { signer: account as never })
  return { client, fetch: wrapFetchWithPayment(fetch, client) }
}

/** HTTPFacilitatorClient pointed at tollgate's /api/v1/facilitator, every call with the merchant's key. */
export function facilitatorClient(base: string, key: string): HTTPFacilitatorClient {
  const auth = { Authorization: `Bearer ${key}` }
  return new HTTPFacilitatorClient({
    url: `${base}/api/v1/facilitator`,
    createAuthHeaders: async () => ({ verify: auth, settle: auth, supported: auth }),
  })
}

/**
 * A price in the test token for the published middleware. It names the token's EIP-712 domain: anvil's test
 * USDC signs as "USD Coin", where Base Sepolia's says "USDC".
 */
export function testUsdcPrice(amountAtomic: bigint, asset: Address) {
  return { amount: amountAtomic.toString(), asset, extra: { name: 'USD Coin', version: '2' } }
}

export interface Shop {
  url: string
  close(): Promise<void>
}

/** A merchant's own express app listening on 127.0.0.1; close() drops its kept-alive connections too. */
export async function listenShop(app: {
  listen(port: number, host: string, cb: () => void): Server
}): Promise<Shop> {
  const server = await new Promise<Server>((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s))
  })
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    async close() {
      server.closeAllConnections()
      await new Promise((resolve) => server.close(resolve))
    },
  }
}
