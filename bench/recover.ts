// npm run bench -- recover: EIP-3009 signer recoveries per CPU second (one core; CPU time, so other work on
// a shared machine does not count), viem's generic typed-data recovery against the verifier's path: the
// hand-built digest and recoverSigner, whose backend (native libsecp256k1, elliptic or viem) is reported.
import { recoverTypedDataAddress } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import {
  authorizationTypedData,
  createAuthorizationNonce,
  signTransferAuthorization,
} from '../src/chain/authorization.ts'
import { keccakBackend } from '../src/chain/keccak.ts'
import {
  authorizationDigest,
  domainSeparator,
  recoverSigner,
  recoveryBackend,
} from '../src/chain/recover-authorization.ts'

export interface RecoveryRates {
  viem_per_s: number
  fast_per_s: number
  fast_backend: string
  keccak_backend: string
}

export async function measureRecovery(count = 2_000): Promise<RecoveryRates> {
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
  const viemPerS = await perCpuSecond(count, async () => {
    for (const s of signed) {
      await recoverTypedDataAddress({
        ...authorizationTypedData({ usdc, chainId }, s.authorization),
        signature: s.signature,
      })
    }
  })
  const expected = account.address.toLowerCase()
  const fastPerS = await perCpuSecond(count, async () => {
    for (const s of signed) {
      const separator = domainSeparator({ ...usdc, chainId, verifyingContract: usdc.address })
      const signer = await recoverSigner(authorizationDigest(separator, s.authorization), s.signature)
      if (signer !== expected) throw new Error('fast recovery disagrees')
    }
  })
  return {
    viem_per_s: viemPerS,
    fast_per_s: fastPerS,
    fast_backend: recoveryBackend,
    keccak_backend: keccakBackend,
  }
}

async function perCpuSecond(count: number, work: () => Promise<void>): Promise<number> {
  const start = process.cpuUsage()
  await work()
  const used = process.cpuUsage(start)
  return Math.round(count / ((used.user + used.system) / 1e6))
}

if (import.meta.url === `file://${process.argv[1]}`) {
  measureRecovery().then((r) => process.stdout.write(`${JSON.stringify(r)}\n`))
}
