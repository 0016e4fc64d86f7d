// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

/// @title ERC1271Wallet
/// @notice A minimal smart-contract wallet for tests of EIP-1271 payers. It
/// accepts a hash as signed when a 65-byte r||s||v ECDSA signature over that
/// exact hash (no prefix) recovers to its owner. It can hold tokens and ETH,
/// and its owner can make it call any contract through execute.
contract ERC1271Wallet {
    // bytes4(keccak256("isValidSignature(bytes32,bytes)"))
    bytes4 private constant MAGIC_VALUE = 0x1626ba7e;
    bytes4 private constant INVALID_VALUE = 0xffffffff;

    // Half the secp256k1 order: signatures with a larger s are malleable (EIP-2).
    uint256 private constant SECP256K1_HALF_N =
        0x7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF5D576E7357A4501DDFE92F46681B20A0;

    address public immutable owner;

    constructor(address owner_) {
        require(owner_ != address(0), "ERC1271Wallet: owner is the zero address");
        owner = owner_;
    }

    receive() external payable {}

    /// @notice EIP-1271: returns 0x1626ba7e if the owner signed hash, 0xffffffff
    /// otherwise. Malformed signatures are rejected, not reverted on.
    function isValidSignature(bytes32 hash, bytes calldata signature) external view returns (bytes4) {
        if (_recover(hash, signature) == owner) {
            return MAGIC_VALUE;
        }
        return INVALID_VALUE;
    }

    /// @notice Calls target with value and data on the owner's behalf, bubbling up a revert.
    function execute(address target, uint256 value, bytes calldata data) external returns (bytes memory) {
        require(msg.sender == owner, "ERC1271Wallet: caller is not the owner");
        (bool success, bytes memory result) = target.call{value: value}(data);
        if (!success) {
            assembly {
                revert(add(result, 0x20), mload(result))
            }
        }
        return result;
    }

    /// @dev Returns the signer, or the zero address for a malformed or
    /// malleable signature.
    function _recover(bytes32 hash, bytes calldata signature) private pure returns (address) {
        if (signature.length != 65) {
            return address(0);
        }
        bytes32 r = bytes32(signature[0:32]);
        bytes32 s = bytes32(signature[32:64]);
        uint8 v = uint8(signature[64]);
        if (uint256(s) > SECP256K1_HALF_N || (v != 27 && v != 28)) {
            return address(0);
        }
        return ecrecover(hash, v, r, s);
    }
}
