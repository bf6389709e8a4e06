"""The device stage: a batch's decode, geometry, colour and output made by torch on a device (``device='cuda'``,
or ``'cpu'``), from the plans that the stream's CPU threads make (docs/gpu.md).

``geometry`` turns a sample's pending map into what the batched warp needs (NumPy only: it runs on the planning
threads); ``warp`` is that warp in torch; ``photometric`` the colour steps; ``decoders`` the GPU's JPEG decoders
(nvImageCodec, torchvision's nvJPEG); ``stage`` decodes, warps, colours and converts a batch; ``executor`` runs the
planning on threads and the stage one batch ahead. Importing ``geometry`` imports no torch; the other modules
import it (``pip install 'picpac[gpu]'``).
"""
