// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

/// @title ReceiptLogAnchor
/// @notice Publishes checkpoints of a gateway's receipt log on chain: each
/// call emits the size and root hash of one checkpoint, with its sender.
/// Anyone may call it; an anchor means something only when it comes from the
/// address a gateway publishes as its anchor sender, which is why the sender
/// is an indexed topic. It keeps no state: the events are the record.
contract ReceiptLogAnchor {
    /// @notice The log of the gateway that sent it had `size` leaves with
    /// root hash `root` (RFC 6962), as in its signed checkpoint of that size.
    event Anchored(address indexed by, uint64 indexed size, bytes32 root);

    /// @notice Anchors the checkpoint of `size` leaves whose root is `root`.
    function anchor(uint64 size, bytes32 root) external {
        emit Anchored(msg.sender, size, root);
    }
}
