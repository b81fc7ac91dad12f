// The chain half of an x402 verification on a real anvil: nonce unused, funds present. Checks of one payer
// share the balance read in flight, and together accept no more than it: a burst of authorizations worth more
// than the wallet holds is served only up to what it holds.
import { type Address, createPublicClient, type Hex, http } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { describe, expect, it } from 'vitest'
import { createAuthorizationNonce } from '../../src/chain/authorization.ts'
import { createAuthorizationChainChecker } from '../../src/chain/check-authorization.ts'
import { chainClients, fundedAccount } from '../helpers/accounts.ts'

const { rpcUrl, usdc } = chainClients()
const BALANCE_OF = '0x70a08231'

/** A client that counts the balanceOf calls the node receives. */
function countingClient() {
  const counted = { balanceReads: 0 }
  const client = createPublicClient({
    transport: http(rpcUrl, {
      batch: { wait: 0 },
      async onFetchRequest(request) {
        const body = await request.clone().text()
        counted.balanceReads += body.split(BALANCE_OF).length - 1
      },
    }),
  })
  return { client, counted }
}

const check = (
  checker: ReturnType<typeof createAuthorizationChainChecker>,
  from: Address,
  value: bigint,
  nonce: Hex = createAuthorizationNonce(),
) => checker({ from, nonce, value })

describe('x402 chain check', () => {
  it('five concurrent authorizations worth more than the balance: those that fit pass, one balance read', async () => {
    const payer = await fundedAccount(30_000n)
    const { client, counted } = countingClient()
    const checker = createAuthorizationChainChecker(client, usdc)

    const results = await Promise.all(Array.from({ length: 5 }, () => check(checker, payer.address, 10_000n)))
    expect(results.filter((r) => r.ok)).toHaveLength(3)
    expect(results.filter((r) => !r.ok && r.reason === 'insufficient_funds')).toHaveLength(2)
    expect(counted.balanceReads).toBe(1)
  })

  it('each payer has its own read; a check after the read is in starts a fresh one', async () => {
    const [a, b] = await Promise.all([fundedAccount(10_000n), fundedAccount(10_000n)])
    const { client, counted } = countingClient()
    const checker = createAuthorizationChainChecker(client, usdc)

    const both = await Promise.all([check(checker, a.address, 10_000n), check(checker, b.address, 10_000n)])
    expect(both).toEqual([{ ok: true }, { ok: true }])
    expect(counted.balanceReads).toBe(2)
    // Nothing was settled: the wallet still holds it, and a later check reads it again (the bound is per read).
    expect(await check(checker, a.address, 10_000n)).toEqual({ ok: true })
    expect(counted.balanceReads).toBe(3)
  })

  it('an empty wallet, and an unreachable node, are answers', async () => {
    const { client } = countingClient()
    const checker = createAuthorizationChainChecker(client, usdc)
    const nobody = privateKeyToAccount(generatePrivateKey()).address
    expect(await check(checker, nobody, 1n)).toEqual({ ok: false, reason: 'insufficient_funds' })

    const down = createAuthorizationChainChecker(
      createPublicClient({ transport: http('http://127.0.0.1:9', { retryCount: 0 }) }),
      usdc,
    )
    expect(await check(down, nobody, 1n)).toEqual({ ok: false, reason: 'rpc_unavailable' })
  })
})
