"""Everything that makes running a student's code safe: the confinement of a process (limits, Landlock, namespaces),
the warm zygote that forks kernels and rechecks, its client, and the kernel launcher nbclient drives.
"""
