// Contracts deployed at a CREATE2 address through the deterministic deployment proxy: the same address on
// every chain for the same creation code, so the service finds them by their code (no configured address).
// Anyone may send the deployment; the contracts hold nothing and have no owner.
import {
  type Account,
  type Address,
  type Chain,
  type Client,
  concat,
  getContractAddress,
  type Hash,
  type Hex,
  type Transport,
  type WalletClient,
  zeroHash,
} from 'viem'
import { getCode, waitForTransactionReceipt } from 'viem/actions'

/** The deterministic deployment proxy (CREATE2 factory) present on anvil, Base and most EVM chains. */
export const DETERMINISTIC_DEPLOYER: Address = '0x4e59b44847b379578588920ca78fbf26c0b4956c'

/** Where the proxy puts the contract of this creation code (salt zero). */
export function create2Address(initCode: Hex): Address {
  return getContractAddress({
    opcode: 'CREATE2',
    from: DETERMINISTIC_DEPLOYER,
    salt: zeroHash,
    bytecode: initCode,
  })
}

/** The proxy's calldata: the salt followed by the creation code. */
export function create2Deployment(initCode: Hex): { to: Address; data: Hex } {
  return { to: DETERMINISTIC_DEPLOYER, data: concat([zeroHash, initCode]) }
}

export type Create2Deployment =
  | { status: 'present' }
  | { status: 'deployed'; tx: Hash }
  | { status: 'no_deployer' }
  | { status: 'failed'; tx: Hash }

/**
 * Deploys the creation code from `wallet` (any funded account) unless `present()` finds it there already;
 * deployed means mined and then found present.
 */
export async function deployCreate2(
  publicClient: Client,
  wallet: WalletClient<Transport, Chain | undefined, Account>,
  q: { initCode: Hex; present: () => Promise<boolean> },
): Promise<Create2Deployment> {
  if (await q.present()) return { status: 'present' }
  const proxy = await getCode(publicClient, { address: DETERMINISTIC_DEPLOYER })
  if (!proxy || proxy === '0x') return { status: 'no_deployer' }
  const tx = await wallet.sendTransaction({ ...create2Deployment(q.initCode), chain: wallet.chain ?? null })
  const receipt = await waitForTransactionReceipt(publicClient, { hash: tx })
  if (receipt.status !== 'success' || !(await q.present())) return { status: 'failed', tx }
  return { status: 'deployed', tx }
}
