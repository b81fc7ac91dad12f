// npm run bench -- recover: EIP-3009 signer recoveries per second on one core, viem's generic typed-data
// recovery against the hand-built digest + @noble/curves recovery the verifier uses.
import { recoverTypedDataAddress } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import {
  authorizationTypedData,
  createAuthorizationNonce,
  signTransferAuthorization,
} from '../src/chain/authorization.ts'
import { authorizationDigest, domainSeparator, recoverSigner } from '../src/chain/recover-authorization.ts'

export async function measureRecovery(count = 2_000): Promise<{ viem_per_s: number; fast_per_s: number }> {
  const usdc = { address: '0x5FbDB2315678afecb367f032d93F642f64180aa3' as const, name: 'USDC', version: '2' }
  const chainId = 31337
  const account = privateKeyToAccount(generatePrivateKey())
  const signed = await Promise.all(
    Array.from({ length: count }, () =>
      signTransferAuthorization(account, {
        usdc,
        chainId,
        to: usdc.address,
        value: 1000n,
        validAfter: 0n,
        validBefore: 4_000_000_000n,
        nonce: createAuthorizationNonce(),
      }),
    ),
  )
  let t = performance.now()
  for (const s of signed) {
    await recoverTypedDataAddress({
      ...authorizationTypedData({ usdc, chainId }, s.authorization),
      signature: s.signature,
    })
  }
  const viemPerS = count / ((performance.now() - t) / 1000)
  t = performance.now()
  for (const s of signed) {
    const separator = domainSeparator({ ...usdc, chainId, verifyingContract: usdc.address })
    if (
      recoverSigner(authorizationDigest(separator, s.authorization), s.signature) !==
      account.address.toLowerCase()
    )
      throw new Error('fast recovery disagrees')
  }
  const fastPerS = count / ((performance.now() - t) / 1000)
  return { viem_per_s: Math.round(viemPerS), fast_per_s: Math.round(fastPerS) }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  measureRecovery().then((r) => process.stdout.write(`${JSON.stringify(r)}\n`))
}
